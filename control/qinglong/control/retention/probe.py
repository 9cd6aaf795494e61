"""Backend capability check: does DeleteObject honour ``If-Match``? (docs/protocols.md §4.3, case
C08)

Some S3-compatible servers accept ``If-Match`` on DeleteObject and delete anyway (MinIO). The
probe puts a canary object, deletes it with a deliberately wrong ``If-Match`` and looks:

- 412 and the canary still there → ``safe``; the canary is then removed with its right ETag
  (unversioned) or its exact VersionId (versioned). A backend that refuses the right ETag too
  is ``unsafe`` (every conditional delete would fail).
- 2xx, or the canary gone, or 501 → ``unsafe``: unversioned deletes are refused with
  ``object_store_unsafe``; exact-VersionId deletes go on; readiness lists the capability as
  degraded with ``reason`` and stays ready (docs/protocols.md §4.1).
- network/5xx/other statuses → ``unavailable`` (readiness reason ``object_store_unavailable``).

Relies only on S3 semantics: PutObject returns an ETag (and a VersionId on a versioned bucket),
DeleteObject returns a VersionId for a delete marker, HEAD answers 404 for a missing object.
Cleanup is best effort and reported in ``canary_removed``. # ADR-0379 §3.2
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from qinglong.control.retention.store_common import ProbeVerdict, TransactionHeldError, http_status

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

    from qinglong.control.readiness import CapabilityStatus

CANARY_PREFIX = "ql3-probe/"
_CANARY_BODY = b"ql3 conditional-delete probe\n"


def probe_conditional_delete(client: S3Client, bucket: str, *,
                             in_transaction: Callable[[], bool],
                             prefix: str = CANARY_PREFIX) -> ProbeVerdict:
    """Run the canary check on ``bucket``; raises only TransactionHeldError (when
    ``in_transaction()`` is True before an S3 call), every S3 failure becomes a verdict."""
    key = f"{prefix}{uuid.uuid4().hex}"

    def guard() -> None:
        if in_transaction():
            raise TransactionHeldError("refusing an S3 call while a database transaction is open")

    guard()
    try:
        put: Any = client.put_object(Bucket=bucket, Key=key, Body=_CANARY_BODY,
                                     ContentType="text/plain")
    except (ClientError, BotoCoreError) as exc:
        return ProbeVerdict("unavailable", f"canary PUT failed: {_describe(exc)}", key, True)
    etag: str = put.get("ETag") or ""
    version: str | None = put.get("VersionId") or None
    if version == "null":
        version = None
    wrong = '"' + ("0" * 32 if etag.strip('"') != "0" * 32 else "f" * 32) + '"'
    guard()
    try:
        resp: Any = client.delete_object(Bucket=bucket, Key=key, IfMatch=wrong)
    except ClientError as exc:
        status = http_status(exc)
        if status == 412:
            return _confirm_safe(client, bucket, key, etag, version, guard)
        if status == 501:
            removed = _cleanup(client, bucket, key, version, None, guard)
            return ProbeVerdict("unsafe", "conditional DELETE not implemented (501)", key,
                                removed)
        removed = _cleanup(client, bucket, key, version, None, guard)
        return ProbeVerdict("unavailable", f"probe DELETE answered {status}", key, removed)
    except BotoCoreError as exc:
        removed = _cleanup(client, bucket, key, version, None, guard)
        return ProbeVerdict("unavailable", f"probe DELETE failed: {_describe(exc)}", key,
                            removed)
    marker: str | None = resp.get("VersionId") if resp.get("DeleteMarker") else None
    removed = _cleanup(client, bucket, key, version, marker, guard)
    return ProbeVerdict("unsafe", "DELETE with a wrong If-Match succeeded", key, removed)


def _confirm_safe(client: S3Client, bucket: str, key: str, etag: str, version: str | None,
                  guard: Callable[[], None]) -> ProbeVerdict:
    """After a 412: the canary must still exist, and the right ETag must delete it."""
    guard()
    try:
        client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if http_status(exc) == 404:
            return ProbeVerdict("unsafe", "412 answered but the canary was deleted", key, True)
        removed = _cleanup(client, bucket, key, version, None, guard)
        return ProbeVerdict("unavailable", f"canary HEAD answered {http_status(exc)}", key,
                            removed)
    except BotoCoreError as exc:
        return ProbeVerdict("unavailable", f"canary HEAD failed: {_describe(exc)}", key, False)
    if version is not None:
        removed = _cleanup(client, bucket, key, version, None, guard)
        return ProbeVerdict("safe", "wrong If-Match refused with 412", key, removed)
    guard()
    try:
        client.delete_object(Bucket=bucket, Key=key, IfMatch=etag)
    except ClientError as exc:
        if http_status(exc) == 412:
            _cleanup(client, bucket, key, None, None, guard)
            return ProbeVerdict("unsafe", "a matching If-Match is refused too (412)", key, True)
        return ProbeVerdict("unavailable", f"canary cleanup answered {http_status(exc)}", key,
                            False)
    except BotoCoreError as exc:
        return ProbeVerdict("unavailable", f"canary cleanup failed: {_describe(exc)}", key,
                            False)
    return ProbeVerdict("safe", "wrong If-Match refused with 412", key, True)


def _cleanup(client: S3Client, bucket: str, key: str, version: str | None,
             marker: str | None, guard: Callable[[], None]) -> bool:
    """Remove the canary (its exact version and a delete marker, when versioned); True on
    success. Unconditional on purpose: the canary key is ours and random."""
    targets: list[str | None] = [v for v in (version, marker) if v is not None]
    targets = targets or [None]
    ok = True
    for target in targets:
        guard()
        try:
            if target is None:
                client.delete_object(Bucket=bucket, Key=key)
            else:
                client.delete_object(Bucket=bucket, Key=key, VersionId=target)
        except (ClientError, BotoCoreError):
            ok = False
    return ok


def _describe(exc: ClientError | BotoCoreError) -> str:
    """A short, secret-free description: an HTTP status or the exception type."""
    if isinstance(exc, ClientError):
        return f"HTTP {http_status(exc)}"
    return type(exc).__name__


def object_store_capability(client: S3Client, bucket: str) -> Callable[[], CapabilityStatus]:
    """A readiness capability probe (``readiness.CapabilityProbe``) for the log bucket.

    Each call runs ``probe_conditional_delete`` on ``bucket`` (no database transaction is held
    by readiness callers) and maps the verdict: ``safe`` → ok, ``unsafe`` → degraded
    ``object_store_unsafe`` (readiness stays ready), ``unavailable`` → unavailable
    ``object_store_unavailable`` (not ready). Never raises. # docs/protocols.md §4.1, §4.3
    """
    from qinglong.control.readiness import CapabilityStatus

    def check() -> CapabilityStatus:
        verdict = probe_conditional_delete(client, bucket, in_transaction=lambda: False)
        if verdict.status == "safe":
            return CapabilityStatus("object_store", "ok")
        if verdict.status == "unsafe":
            return CapabilityStatus("object_store", "degraded", "object_store_unsafe",
                                    verdict.reason)
        return CapabilityStatus("object_store", "unavailable", "object_store_unavailable",
                                verdict.reason)

    return check
