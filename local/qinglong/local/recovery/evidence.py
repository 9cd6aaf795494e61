"""The facts the reconciler weighs for one attempt, for operators (``recovery status
--verbose``): process verdict, receipt state and attempt lock, read-only."""

from __future__ import annotations

from typing import Any

from qinglong.local.process.lock_holders import find_lock_holders
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.shared.domain import Attempt
from qinglong.shared.errors import HandleCodecError, ProcessIdentityError, ReceiptCodecError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.identity import probe_handle


def attempt_evidence(receipts: ReceiptStore, attempt: Attempt) -> dict[str, Any]:
    """``{"attempt", "status", "handle", "process", "receipt", "lock"}`` where ``process``
    is alive|gone|zombie|regrouped|no_handle|unknown, ``receipt`` valid|invalid|none and
    ``lock`` held|free, ``lock_holders`` the pids holding it (a /proc scan, only when held).
    Touches nothing; signals nothing."""
    process = "no_handle"
    if attempt.handle is not None:
        try:
            process = probe_handle(ProcessHandle.decode(attempt.handle))
        except (HandleCodecError, ProcessIdentityError):
            process = "unknown"
    try:
        receipt = "valid" if receipts.read(attempt.id) is not None else "none"
    except ReceiptCodecError:
        receipt = "invalid"
    try:
        lock = "held" if receipts.lock_held(attempt.id) else "free"
    except OSError:
        lock = "unknown"
    holders = find_lock_holders(receipts.lock_path(attempt.id)) if lock == "held" else []
    return {
        "lock_holders": holders,
        "attempt": attempt.number,
        "status": attempt.status.value,
        "handle": attempt.handle,
        "process": process,
        "receipt": receipt,
        "lock": lock,
    }
