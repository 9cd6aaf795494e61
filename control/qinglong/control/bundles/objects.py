"""Bundle objects in the bucket (docs/protocols.md §4.7): key ``bundles/sha256/<hex>``, one
object per digest, written by control only (workers read through presigned GETs).

Every call is made outside any database transaction. The S3 client is the replica's (no SDK
retries); failures become BundleStoreError naming the failure class.
"""

from __future__ import annotations

import base64
from typing import IO, Any

from qinglong.control.bundles.errors import BundleStoreError

OBJECT_PREFIX = "bundles/sha256/"
CONTENT_TYPE = "application/gzip"


def object_key(digest: str) -> str:
    """The bucket key of the bundle ``digest`` (64 lowercase hex characters)."""
    return f"{OBJECT_PREFIX}{digest}"


def _failure(exc: Exception) -> BundleStoreError:
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "ClientError")
        return BundleStoreError(f"S3 {code}")
    return BundleStoreError(type(exc).__name__)


def put_bundle(s3: Any, bucket: str, digest: str, data: bytes | IO[bytes]) -> None:
    """Store ``data`` (bytes, or a seekable file at its start) under the digest's key with
    its SHA-256 checksum and metadata ``ql3-sha256``. BundleStoreError on any failure."""
    from botocore.exceptions import BotoCoreError, ClientError

    checksum = base64.b64encode(bytes.fromhex(digest)).decode("ascii")
    try:
        s3.put_object(Bucket=bucket, Key=object_key(digest), Body=data,
                      ContentType=CONTENT_TYPE, ChecksumSHA256=checksum,
                      Metadata={"ql3-sha256": digest})
    except (BotoCoreError, ClientError) as exc:
        raise _failure(exc) from None


def bundle_present(s3: Any, bucket: str, digest: str) -> bool:
    """True when the digest's object exists (HEAD); False on 404. BundleStoreError on any
    other failure."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        s3.head_object(Bucket=bucket, Key=object_key(digest))
    except ClientError as exc:
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404:
            return False
        raise _failure(exc) from None
    except BotoCoreError as exc:
        raise _failure(exc) from None
    return True


def delete_bundle(s3: Any, bucket: str, digest: str) -> None:
    """Delete the digest's object (on a versioned bucket: a delete marker; older versions
    follow the bucket's lifecycle rules). BundleStoreError on failure."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        s3.delete_object(Bucket=bucket, Key=object_key(digest))
    except (BotoCoreError, ClientError) as exc:
        raise _failure(exc) from None
