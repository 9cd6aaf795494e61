"""Presigned log upload (docs/protocols.md §4.2, logs).

The worker never holds bucket credentials: for a live lease, control signs one PUT of the
object named from the artifact identity ``wlog-<attempt uuid>`` (key
``p/<project>/wlog-<attempt>``, as retention and its tests name it), with the identity
metadata (``ql3-project``, ``ql3-run``, ``ql3-attempt``, ``ql3-artifact``, ``ql3-sha256``,
``ql3-size``: ``retention/objects.py``), content type, content length and the SHA-256
checksum bound into the signature. The grant lists exactly the headers the worker must send.
Completion (``completion.py``) HEADs the object and refuses anything else.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import LogStoreUnavailableError
from qinglong.control.dispatch.leases import require_live_lease
from qinglong.control.retention.objects import ArtifactIdentity
from qinglong.shared.wire import LogFacts, LogUploadGrant, LogUploadRequest

if TYPE_CHECKING:
    from qinglong.control.db.engine import Transactions


def artifact_id(attempt_id: str) -> str:
    """The canonical artifact identity of an attempt's worker log: ``wlog-<attempt uuid>``."""
    return f"wlog-{attempt_id}"


def log_identity(*, bucket: str, project_id: str, run_id: str, attempt_id: str,
                 facts: LogFacts, version_id: str | None = None) -> ArtifactIdentity:
    """The object a worker uploads for ``attempt_id``: key ``p/<project>/wlog-<attempt>``,
    the claimed size/sha256/content type and the identity metadata. ValidationError when a
    fact is malformed (``ArtifactIdentity``)."""
    art = artifact_id(attempt_id)
    return ArtifactIdentity(
        bucket=bucket, key=f"p/{project_id}/{art}", version_id=version_id,
        content_type=facts.content_type, size=facts.size_bytes, sha256=facts.sha256,
        metadata={"project": project_id, "run": run_id, "attempt": attempt_id,
                  "artifact": art})


def grant_log_upload(engine: Transactions, config: DispatchConfig, *, s3: Any, bucket: str | None,
                     pool_id: str, request: LogUploadRequest) -> LogUploadGrant:
    """A presigned PUT (``config.upload_url_ttl_s`` seconds) for the attempt's log, only for
    a live lease of ``pool_id`` (LeaseLostError otherwise). LogStoreUnavailableError when no
    bucket is configured. Signing is local: no S3 call, nothing written."""
    if s3 is None or not bucket:
        raise LogStoreUnavailableError("no log bucket is configured")
    with engine.begin() as conn:
        state = require_live_lease(conn, pool_id, request.lease)
    ident = log_identity(bucket=bucket, project_id=state["project_id"],
                         run_id=state["run_id"], attempt_id=state["attempt_id"],
                         facts=request.log)
    checksum = base64.b64encode(bytes.fromhex(ident.sha256)).decode("ascii")
    metadata = ident.object_metadata()
    url = s3.generate_presigned_url(
        ClientMethod="put_object", ExpiresIn=config.upload_url_ttl_s, HttpMethod="PUT",
        Params={"Bucket": bucket, "Key": ident.key, "ContentType": ident.content_type,
                "ContentLength": ident.size, "Metadata": metadata,
                "ChecksumSHA256": checksum})
    headers = {"Content-Type": ident.content_type, "Content-Length": str(ident.size),
               "x-amz-checksum-sha256": checksum}
    headers.update({f"x-amz-meta-{name}": value for name, value in metadata.items()})
    return LogUploadGrant(url=str(url), headers=headers, object_key=ident.key,
                          expires_in_s=config.upload_url_ttl_s)
