"""Dispatch timing handed out with every claim (docs/protocols.md §4.2; case C11)."""

from __future__ import annotations

from dataclasses import dataclass

from qinglong.shared.errors import ValidationError
from qinglong.shared.wire import MAX_CLAIM

LEASE_MS_DEFAULT = 30_000
HEARTBEAT_MS_DEFAULT = 10_000
UPLOAD_URL_TTL_S_DEFAULT = 900
BUNDLE_URL_TTL_S_DEFAULT = 300


class InvalidDispatchConfigError(ValidationError):
    """A dispatch configuration control refuses at start (C11); the message names the numbers
    that broke the rule, never anything secret."""

    code = "invalid_dispatch_config"


@dataclass(frozen=True)
class DispatchConfig:
    """Control's lease policy, validated at construction (docs/protocols.md §4.2, case C11).

    ``lease_ms``: how long a claim or heartbeat keeps an attempt leased, measured on the
    database clock (1 s – 1 h). ``heartbeat_ms``: the period a worker renews at; at most a
    third of the lease, so two renewals can be lost before expiry. ``max_claim``: the most
    attempts one claim call hands out (1–64). ``upload_url_ttl_s``: lifetime of a presigned
    log PUT (60 s – 7 days). ``bundle_url_ttl_s``: lifetime of a presigned bundle GET
    (60 s – 1 h; docs/protocols.md §4.7). Raises InvalidDispatchConfigError (a
    ValidationError) naming both numbers when the heartbeat is above a third of the lease.
    """

    lease_ms: int = LEASE_MS_DEFAULT
    heartbeat_ms: int = HEARTBEAT_MS_DEFAULT
    max_claim: int = MAX_CLAIM
    upload_url_ttl_s: int = UPLOAD_URL_TTL_S_DEFAULT
    bundle_url_ttl_s: int = BUNDLE_URL_TTL_S_DEFAULT

    def __post_init__(self) -> None:
        if not 1_000 <= self.lease_ms <= 3_600_000:
            raise InvalidDispatchConfigError(
                "lease_ms", f"lease {self.lease_ms} ms must be between 1000 and 3600000")
        if self.heartbeat_ms <= 0 or self.heartbeat_ms * 3 > self.lease_ms:
            raise InvalidDispatchConfigError(
                "heartbeat_ms",
                f"heartbeat {self.heartbeat_ms} ms must be positive and at most a third of "
                f"the lease {self.lease_ms} ms")
        if not 1 <= self.max_claim <= MAX_CLAIM:
            raise InvalidDispatchConfigError("max_claim", f"must be 1–{MAX_CLAIM}")
        if not 60 <= self.upload_url_ttl_s <= 604_800:
            raise InvalidDispatchConfigError("upload_url_ttl_s", "must be 60–604800 seconds")
        if not 60 <= self.bundle_url_ttl_s <= 3600:
            raise InvalidDispatchConfigError("bundle_url_ttl_s", "must be 60–3600 seconds")
