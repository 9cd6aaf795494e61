"""What the S3 side of log retention (``objects.py``) and its capability probe (``probe.py``)
share: the probe's verdict, the error for an S3 call inside a database transaction, and the
HTTP status of a botocore ClientError (ADR-0379 §3; docs/protocols.md §4.3).

Both modules import this one and never each other (``objects.TransactionHeldError``,
``objects.http_status`` and ``probe.ProbeVerdict`` still name the same objects at run time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from qinglong.shared.errors import QinglongError

if TYPE_CHECKING:
    from botocore.exceptions import ClientError


class TransactionHeldError(QinglongError):
    """An S3 call was attempted while a database transaction is open (ADR-0379 §3)."""
    code = "transaction_held_across_s3"


@dataclass(frozen=True)
class ProbeVerdict:
    """The probe's answer: ``status`` safe/unsafe/unavailable, a short ``reason``, the canary
    key used and whether the canary was removed afterwards."""

    status: Literal["safe", "unsafe", "unavailable"]
    reason: str
    canary_key: str
    canary_removed: bool

    @property
    def allows_unversioned_delete(self) -> bool:
        """True only for ``safe``: an unprobed or unavailable backend is not trusted."""
        return self.status == "safe"

    @property
    def degraded(self) -> tuple[str, ...]:
        """Degraded capabilities for readiness: ``("object_store_unsafe",)`` or ``()``."""
        return ("object_store_unsafe",) if self.status == "unsafe" else ()

    @property
    def readiness_reason(self) -> str | None:
        """``object_store_unavailable`` when the probe could not reach the store, else None."""
        return "object_store_unavailable" if self.status == "unavailable" else None


def http_status(exc: ClientError) -> int:
    """The HTTP status of a ClientError (0 when the response carries none)."""
    meta: Any = exc.response.get("ResponseMetadata", {})
    status = meta.get("HTTPStatusCode", 0)
    return status if isinstance(status, int) else 0
