"""S3 side of log retention: validated HEAD and conditional delete (ADR-0379 §3; docs/protocols.md
§4.3).

``S3ObjectStore`` implements the ``ObjectStore`` port over a boto3 S3 client. It relies only on
what the S3 API defines and docs/protocols.md names, never on what one server alone returns:

- HEAD answers 404 for a missing object (and for a missing VersionId); ``Content-Type``,
  ``Content-Length``, ``ETag``, user metadata (``x-amz-meta-*``, keys lower-cased) and, on a
  versioned bucket, ``x-amz-version-id`` come back as written.
- The identity proof is what WE wrote (``ql3-*`` metadata: project, run, attempt, artifact,
  sha256, size) and recorded. A server's own full-object ``x-amz-checksum-sha256`` is compared
  only when returned (a mismatch fails closed: the safe direction).
- DeleteObject with ``If-Match`` answers 412 on a changed ETag and 404 on a missing key; some
  servers ignore it (MinIO): unversioned deletes need a ``safe`` verdict from ``probe.py``.
- Delete by exact VersionId removes exactly that version; VersionId and If-Match are never sent
  together (AWS answers 501, moto checks the latest version).

The client must not retry on its own (``make_client`` sets one attempt): a retried DELETE after a
lost response would hide the fault the protocol heals with a later claim (ADR-0379 §3.6).

Errors carry ``failure_class`` (the persisted class: ``artifact_unavailable``,
``artifact_integrity_mismatch``, ``object_store_unsafe``) and a short ``reason`` naming a field
or an HTTP status, never a secret or an object's content.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from qinglong.control.retention.store_common import ProbeVerdict, TransactionHeldError, http_status
from qinglong.shared.errors import QinglongError, ValidationError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

META_PREFIX = "ql3-"
IDENTITY_FIELDS = ("project", "run", "attempt", "artifact")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class ObjectStoreError(QinglongError):
    """An S3 step failed; ``failure_class`` is what the control row records (ADR-0379 §4)."""
    code = "object_store_failure"
    failure_class = "artifact_unavailable"

    def __init__(self, reason: str) -> None:
        super().__init__(f"{self.failure_class}: {reason}")
        self.reason = reason


class ArtifactUnavailableError(ObjectStoreError):
    """Network error, timeout, 5xx, 403 or an inconsistent answer: retry later."""
    code = failure_class = "artifact_unavailable"


class ArtifactIntegrityMismatchError(ObjectStoreError):
    """The object is not the recorded artifact (412, or a field differs): fail closed, no delete."""
    code = failure_class = "artifact_integrity_mismatch"


class ObjectStoreUnsafeError(ObjectStoreError):
    """Unversioned deletes refused: the backend does not honour ``If-Match`` (or is unprobed)."""
    code = failure_class = "object_store_unsafe"


@dataclass(frozen=True)
class ArtifactIdentity:
    """One uploaded log object as recorded in PostgreSQL at completion (docs/protocols.md §4.2).

    ``version_id`` is the VersionId the upload returned (versioned bucket) or None. ``sha256``
    is 64 lower-case hex digits of the bytes; ``size`` their count; ``metadata`` maps exactly
    ``project``, ``run``, ``attempt``, ``artifact`` to printable ASCII strings.
    Raises ValidationError when a field is malformed.
    """

    bucket: str
    key: str
    version_id: str | None
    content_type: str
    size: int
    sha256: str
    metadata: Mapping[str, str]

    def __post_init__(self) -> None:
        if not self.bucket or not self.key:
            raise ValidationError("bucket", "bucket and key must be non-empty")
        if self.version_id is not None and self.version_id in ("", "null"):
            # "null" names whatever object a suspended-versioning bucket holds now, so a
            # re-upload could be deleted by it: record None (unversioned) instead
            raise ValidationError("version_id", "must be None or a real VersionId (not null)")
        if not self.content_type:
            raise ValidationError("content_type", "must be non-empty")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValidationError("size", "must be a non-negative integer")
        if not _SHA256_HEX.fullmatch(self.sha256):
            raise ValidationError("sha256", "must be 64 lower-case hex digits")
        if sorted(self.metadata) != sorted(IDENTITY_FIELDS):
            raise ValidationError("metadata", f"keys must be exactly {IDENTITY_FIELDS}")
        for name, value in self.metadata.items():
            if not value or not value.isascii() or not value.isprintable():
                raise ValidationError(f"metadata.{name}", "must be non-empty printable ASCII")
        object.__setattr__(self, "metadata", dict(self.metadata))

    def object_metadata(self) -> dict[str, str]:
        """The user metadata an uploader writes (``Metadata=`` of PutObject) and HEAD checks."""
        meta = {META_PREFIX + name: self.metadata[name] for name in IDENTITY_FIELDS}
        meta[META_PREFIX + "sha256"] = self.sha256
        meta[META_PREFIX + "size"] = str(self.size)
        return meta


@dataclass(frozen=True)
class HeadResult:
    """``present`` (every field matched; ``etag`` and ``version_id`` as the server sent them)
    or ``absent`` (404; both None)."""

    state: Literal["present", "absent"]
    etag: str | None = None
    version_id: str | None = None


@dataclass(frozen=True)
class DeleteResult:
    """``deleted`` (server acknowledged) or ``already_absent`` (a 404 on the conditional delete,
    confirmed by HEAD). ``delete_marker``: the server only hid the object behind a delete marker
    (an unversioned identity on a bucket versioned later)."""

    outcome: Literal["deleted", "already_absent"]
    delete_marker: bool = False


class ObjectStore(Protocol):
    """The port the retention sweeper calls (ADR-0379 §3 steps 1–3)."""

    def head(self, identity: ArtifactIdentity) -> HeadResult:
        """Validated HEAD; raises ObjectStoreError subclasses or TransactionHeldError."""

    def delete(self, identity: ArtifactIdentity, etag: str | None) -> DeleteResult:
        """Exact-version or ``If-Match`` delete; raises like ``head``."""


def make_client(endpoint_url: str | None, *, region: str = "us-east-1",
                timeout_s: float = 10.0, **credentials: str) -> S3Client:
    """A boto3 S3 client fit for this module: path-style, one attempt (no SDK retry), bounded
    connect/read timeouts. ``credentials`` go to ``boto3.client`` (aws_access_key_id, ...)."""
    import boto3
    from botocore.config import Config
    config = Config(region_name=region, retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=timeout_s, read_timeout=timeout_s,
                    s3={"addressing_style": "path"})
    client: S3Client = boto3.client("s3", endpoint_url=endpoint_url, config=config,
                                    **credentials)  # type: ignore[call-overload]
    return client


class S3ObjectStore:
    """``ObjectStore`` over boto3. ``in_transaction()`` is asked before every S3 call and a True
    answer raises TransactionHeldError (ADR-0379 §3: no database transaction across S3). ``verdict``
    is the latest backend probe (``probe.py``); without a ``safe`` one, unversioned deletes raise
    ObjectStoreUnsafeError and exact-VersionId deletes go on (docs/protocols.md §4.3)."""

    def __init__(self, client: S3Client, *, in_transaction: Callable[[], bool],
                 verdict: ProbeVerdict | None = None, server_checksum: bool = True) -> None:
        self._client, self._in_transaction = client, in_transaction
        self._verdict, self._server_checksum = verdict, server_checksum
        model = client.meta.service_model.operation_model("DeleteObject").input_shape
        # botocore < 1.35.99 has no IfMatch on DeleteObject: refuse unversioned deletes then.
        self._sdk_if_match = model is not None and "IfMatch" in model.members

    def apply_verdict(self, verdict: ProbeVerdict) -> None:
        """Replace the backend verdict (called at start and after each periodic probe)."""
        self._verdict = verdict

    def guard(self) -> None:
        """Raise TransactionHeldError when a database transaction is open. # ADR-0379 §3"""
        if self._in_transaction():
            raise TransactionHeldError("refusing an S3 call while a database transaction is open")

    def head(self, identity: ArtifactIdentity) -> HeadResult:
        """Validated HEAD of the recorded object (its VersionId when it has one).

        Returns present (every field matched) or absent (404). Raises ArtifactIntegrityMismatchError
        naming the first differing field, ArtifactUnavailableError on network/5xx/other statuses.
        # ADR-0379 §3.1
        """
        self.guard()
        kwargs: dict[str, Any] = {"Bucket": identity.bucket, "Key": identity.key}
        if identity.version_id is not None:
            kwargs["VersionId"] = identity.version_id
        if self._server_checksum:
            kwargs["ChecksumMode"] = "ENABLED"
        try:
            resp: Mapping[str, Any] = self._client.head_object(**kwargs)
        except ClientError as exc:
            status = http_status(exc)
            if status == 404:
                return self._confirm_absent(identity, exc)
            raise ArtifactUnavailableError(f"HEAD answered {status}") from exc
        except BotoCoreError as exc:
            raise ArtifactUnavailableError(f"HEAD failed: {type(exc).__name__}") from exc
        field = _first_mismatch(identity, resp)
        if field is not None:
            raise ArtifactIntegrityMismatchError(f"HEAD: {field} differs from the record")
        etag, version = resp.get("ETag"), resp.get("VersionId")
        return HeadResult("present", etag if isinstance(etag, str) else None,
                          version if isinstance(version, str) else None)

    def delete(self, identity: ArtifactIdentity, etag: str | None) -> DeleteResult:
        """Delete exactly the validated object. # ADR-0379 §3.2–§3.3

        Versioned identity: DeleteObject with its exact VersionId (never If-Match). Unversioned:
        DeleteObject with ``If-Match: etag`` (never a VersionId), refused with
        ObjectStoreUnsafeError unless the probe verdict is safe. 412 (or 400 on a recorded
        VersionId) raises ArtifactIntegrityMismatchError; 501 ObjectStoreUnsafeError; a 404 is
        settled by HEAD (absent → ``already_absent``, present → ArtifactUnavailableError);
        network/5xx ArtifactUnavailableError.
        """
        kwargs: dict[str, Any] = {"Bucket": identity.bucket, "Key": identity.key}
        if identity.version_id is not None:
            kwargs["VersionId"] = identity.version_id
        else:
            verdict = self._verdict
            if not self._sdk_if_match or verdict is None or not verdict.allows_unversioned_delete:
                why = "not probed" if verdict is None else verdict.reason
                why = why if self._sdk_if_match else "SDK cannot send If-Match"
                raise ObjectStoreUnsafeError(f"unversioned delete refused: {why}")
            if not etag:
                raise ArtifactIntegrityMismatchError("no ETag from HEAD for a conditional delete")
            kwargs["IfMatch"] = etag
        self.guard()
        try:
            resp: Mapping[str, Any] = self._client.delete_object(**kwargs)
        except ClientError as exc:
            status = http_status(exc)
            if status == 412:
                raise ArtifactIntegrityMismatchError("DELETE If-Match failed (412)") from exc
            if status == 400 and identity.version_id is not None:
                raise ArtifactIntegrityMismatchError("DELETE rejected the VersionId") from exc
            if status == 501:
                raise ObjectStoreUnsafeError("DELETE condition not implemented (501)") from exc
            if status == 404:
                return self._settle_not_found(identity)
            raise ArtifactUnavailableError(f"DELETE answered {status}") from exc
        except BotoCoreError as exc:
            raise ArtifactUnavailableError(f"DELETE failed: {type(exc).__name__}") from exc
        if resp.get("DeleteMarker") and identity.version_id is None:
            raise ObjectStoreUnsafeError(
                "DELETE only added a delete marker: the bucket is versioned now, the recorded "
                "object has no VersionId and its bytes remain")
        return DeleteResult("deleted", delete_marker=bool(resp.get("DeleteMarker")))

    def _confirm_absent(self, identity: ArtifactIdentity, exc: ClientError) -> HeadResult:
        """A 404 on HEAD means absent only when nothing hides the bytes and the bucket is there.

        A current delete marker (``x-amz-delete-marker: true``) over an unversioned record
        means the bucket became versioned and the bytes remain: ObjectStoreUnsafeError. A
        missing or unreachable bucket (HeadBucket not 200): ArtifactUnavailableError, never a
        tombstone. # ADR-0379 §3.6, docs/protocols.md §4.4 (never a fake retired)
        """
        meta: Any = exc.response.get("ResponseMetadata", {})
        headers = {str(k).lower(): v for k, v in (meta.get("HTTPHeaders") or {}).items()}
        if (identity.version_id is None
                and str(headers.get("x-amz-delete-marker", "")).lower() == "true"):
            raise ObjectStoreUnsafeError(
                "a delete marker hides the object: the bucket is versioned now and the "
                "recorded object has no VersionId")
        self.guard()
        try:
            self._client.head_bucket(Bucket=identity.bucket)
        except ClientError as bucket_exc:
            raise ArtifactUnavailableError(
                f"object not found and HeadBucket answered {http_status(bucket_exc)}"
            ) from bucket_exc
        except BotoCoreError as bucket_exc:
            raise ArtifactUnavailableError(
                f"HeadBucket failed: {type(bucket_exc).__name__}") from bucket_exc
        return HeadResult("absent")

    def _settle_not_found(self, identity: ArtifactIdentity) -> DeleteResult:
        """A 404 on DELETE: HEAD decides (ADR-0379 §3.6 already_absent path)."""
        if self.head(identity).state == "absent":
            return DeleteResult("already_absent")
        raise ArtifactUnavailableError("DELETE answered 404 but HEAD finds the object")


def _first_mismatch(identity: ArtifactIdentity, resp: Mapping[str, Any]) -> str | None:
    """The name of the first HEAD field that differs from ``identity``, or None."""
    if resp.get("ContentType") != identity.content_type:
        return "content_type"
    if resp.get("ContentLength") != identity.size:
        return "content_length"
    if resp.get("VersionId") not in (None, identity.version_id) and identity.version_id:
        return "version_id"  # HEAD addressed the recorded version: any other is a change
    raw: Any = resp.get("Metadata") or {}
    meta = {str(k).lower(): v for k, v in raw.items()}
    for name, expected in identity.object_metadata().items():
        if meta.get(name) != expected:
            return f"metadata.{name}"
    return _checksum_mismatch(identity, resp)


def _checksum_mismatch(identity: ArtifactIdentity, resp: Mapping[str, Any]) -> str | None:
    """Compare the server's SHA-256 only when it returned a full-object one."""
    value = resp.get("ChecksumSHA256")
    if not isinstance(value, str) or not value:
        return None
    if resp.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT" or "-" in value:
        return None  # composite (multipart) checksum: not a digest of the bytes
    try:
        digest = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return "server_checksum_sha256"
    return None if digest == bytes.fromhex(identity.sha256) else "server_checksum_sha256"
