"""Pushing a bundle (docs/protocols.md §4.7): check, store, record — idempotent by digest.

1. hash the body (SHA-256) and check every member with the shared checker
   (``qinglong.shared.bundles.scan``, the worker's own) — a refused archive changes nothing;
2. a digest already recorded answers its row (after putting the object back if the bucket
   lost it);
3. otherwise PUT the object (no transaction open), then insert the row
   (``ON CONFLICT DO NOTHING``: a concurrent push of the same bytes answers the same row).
"""

from __future__ import annotations

import hashlib
from typing import IO, TYPE_CHECKING, Any

from qinglong.control.bundles import records
from qinglong.control.bundles.errors import BundleStoreError
from qinglong.control.bundles.objects import bundle_present, put_bundle
from qinglong.shared.bundles import DEFAULT_LIMITS, BundleLimits, scan

CHUNK_BYTES = 65536

if TYPE_CHECKING:
    from sqlalchemy import Engine, RowMapping


def push_bundle(engine: Engine, s3: Any, bucket: str | None, data: IO[bytes], by: str,
                limits: BundleLimits = DEFAULT_LIMITS) -> tuple[RowMapping, bool]:
    """Record the bundle in the seekable file ``data`` (gzip tar bytes, read from its
    start; a spooled temporary file at the API) pushed by token ``by``; returns (its summary
    row with ``used_by``, True when it was new).

    Raises BundleError / BundleTooLargeError (nothing stored) for a refused archive and
    BundleStoreError when no bucket is configured or it cannot be reached.
    """
    if s3 is None or not bucket:
        raise BundleStoreError("no bucket is configured")
    data.seek(0)
    hasher = hashlib.sha256()
    while chunk := data.read(CHUNK_BYTES):
        hasher.update(chunk)
    digest, size = hasher.hexdigest(), data.tell()
    data.seek(0)
    manifest = scan(data, limits)
    with engine.connect() as conn:
        existing = records.find(conn, digest)
    if existing is not None:
        if not bundle_present(s3, bucket, digest):
            data.seek(0)
            put_bundle(s3, bucket, digest, data)
        return existing, False
    data.seek(0)
    put_bundle(s3, bucket, digest, data)
    with engine.begin() as conn:
        created = records.record(conn, digest, size, manifest, by)
        row = records.find(conn, digest)
    if row is None:  # removed by a concurrent rm between the two pushes' inserts
        raise BundleStoreError("a concurrent removal; push again")
    return row, created
