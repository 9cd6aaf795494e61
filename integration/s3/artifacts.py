"""Test helper: upload a log object the way a worker does (docs/protocols.md §4.2) and return its
recorded ``ArtifactIdentity``."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from qinglong.control.retention.objects import ArtifactIdentity


def upload(client: Any, bucket: str, body: bytes, *, key: str | None = None,
           content_type: str = "text/plain; charset=utf-8",
           describes: bytes | None = None) -> ArtifactIdentity:
    """PutObject with our ``ql3-*`` metadata and ``ChecksumAlgorithm=SHA256`` (the SDK computes
    the server-side checksum from the bytes sent); records the VersionId when the bucket returns
    one. ``describes``: the bytes our metadata and identity claim (default ``body``), to model a
    corrupted upload whose recorded digest is not the stored bytes'."""
    attempt = str(uuid.uuid4())
    artifact = f"wlog-{attempt}"
    key = key or artifact
    sha = hashlib.sha256(body if describes is None else describes).hexdigest()
    draft = ArtifactIdentity(
        bucket=bucket, key=key, version_id=None, content_type=content_type, size=len(body),
        sha256=sha, metadata={"project": "default", "run": str(uuid.uuid4()),
                              "attempt": attempt, "artifact": artifact})
    resp = client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type,
                             Metadata=draft.object_metadata(), ChecksumAlgorithm="SHA256")
    version = resp.get("VersionId")
    if not version or version == "null":
        return draft
    return ArtifactIdentity(bucket=bucket, key=key, version_id=version,
                            content_type=content_type, size=len(body), sha256=sha,
                            metadata=draft.metadata)
