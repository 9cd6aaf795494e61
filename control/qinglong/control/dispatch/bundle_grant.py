"""Presigned bundle download (docs/protocols.md §4.7): the worker fetches a script bundle
without bucket credentials.

For a live lease of the caller's pool whose attempt was claimed with exactly the requested
digest (``attempts.bundle_digest``, written by the claim) and whose bundle is still recorded,
control signs one GET of the bundle's object, valid ``config.bundle_url_ttl_s`` seconds.
Anything else — another attempt's bundle, a removed bundle, a lease that is not live — is
404 ``bundle_not_found``: a worker never learns whether some other bundle exists. The
worker verifies the SHA-256 of what it gets; control does not sign a version or checksum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import BundleNotFoundError, LogStoreUnavailableError
from qinglong.control.dispatch.leases import lease_params
from qinglong.control.dispatch.statements import sql
from qinglong.shared.wire import BundleGrant, BundleRequest

if TYPE_CHECKING:
    from qinglong.control.db.engine import Transactions


def grant_bundle_fetch(engine: Transactions, config: DispatchConfig, *, s3: Any,
                       bucket: str | None, pool_id: str, request: BundleRequest
                       ) -> BundleGrant:
    """A presigned GET of ``request.digest`` for the attempt behind ``request.lease``.

    Raises BundleNotFoundError (404) unless the lease is live, of ``pool_id``, and its
    attempt was claimed with that recorded bundle; LogStoreUnavailableError (503) when no
    bucket is configured. Signing is local: no S3 call, nothing written.
    """
    if s3 is None or not bucket:
        raise LogStoreUnavailableError("no bucket is configured")
    with engine.begin() as conn:
        row = run_named(conn, sql("lease_bundle"), lease_params(
            pool_id, request.lease, digest=request.digest)).mappings().first()
    if row is None:
        raise BundleNotFoundError("no such bundle for this live lease")
    url = s3.generate_presigned_url(
        ClientMethod="get_object", ExpiresIn=config.bundle_url_ttl_s, HttpMethod="GET",
        Params={"Bucket": bucket, "Key": row["object_key"]})
    return BundleGrant(digest=row["digest"], url=str(url), size_bytes=int(row["size_bytes"]),
                       expires_in_s=config.bundle_url_ttl_s)
