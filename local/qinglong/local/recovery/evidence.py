"""The facts the reconciler weighs for one attempt, for operators (``recovery status
--verbose``): process verdict, receipt state and attempt lock, read-only.

Issue 10 item 7: one attempt's unreadable receipt shard (a symlink, a receipt that is a
directory, a permission or I/O error) is reported as ``unreadable`` with a reason class for
that attempt alone; it never fails the view of every other run.
"""

from __future__ import annotations

from typing import Any

from qinglong.local.process.paths import UnsafePathError
from qinglong.local.process.receipt_store import ReceiptNotAFileError, ReceiptStore
from qinglong.local.process.wrapper_identity import is_wrapper_of
from qinglong.shared.domain import Attempt
from qinglong.shared.errors import HandleCodecError, ProcessIdentityError, ReceiptCodecError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.identity import Liveness, probe_handle
from qinglong.shared.process.lock_holders import find_lock_holders


def unreadable_reason(exc: BaseException) -> str:
    """The reason class of a receipt or lock that cannot be read: ``unsafe_path`` (a
    symlinked or non-directory root/shard, or a lock that is not a regular file),
    ``not_a_file`` (the receipt is a symlink, directory, FIFO…), ``permission`` or
    ``io_error``. Never a path, never file content (issue 10 item 7)."""
    if isinstance(exc, UnsafePathError):
        return "unsafe_path"
    if isinstance(exc, ReceiptNotAFileError):
        return "not_a_file"
    if isinstance(exc, PermissionError):
        return "permission"
    return "io_error"


def attempt_evidence(receipts: ReceiptStore, attempt: Attempt) -> dict[str, Any]:
    """``{"attempt", "status", "handle", "process", "receipt", "lock", "lock_holders"}``.

    ``process`` is alive|gone|zombie|regrouped|no_handle|corrupt_handle|not_the_wrapper
    (a live process not launched for this attempt: a copied handle)|unknown;
    ``receipt`` valid|invalid|none|unreadable; ``lock`` held|free|missing|unreadable;
    ``lock_holders`` the pids holding it (a /proc scan, only when held). An ``unreadable``
    receipt or lock adds ``receipt_unreadable`` / ``lock_unreadable`` with the reason class
    of :func:`unreadable_reason`. Touches nothing; signals nothing; raises nothing for the
    attempt's files (docs/protocols.md §3.4; issue 10 item 7).
    """
    view: dict[str, Any] = {
        "attempt": attempt.number,
        "status": attempt.status.value,
        "handle": attempt.handle,
        "process": _process(attempt),
    }
    try:
        view["receipt"] = "valid" if receipts.read(attempt.id) is not None else "none"
    except ReceiptNotAFileError as exc:
        view["receipt"], view["receipt_unreadable"] = "unreadable", unreadable_reason(exc)
    except ReceiptCodecError:
        view["receipt"] = "invalid"
    except (OSError, UnsafePathError) as exc:
        view["receipt"], view["receipt_unreadable"] = "unreadable", unreadable_reason(exc)
    try:
        view["lock"] = receipts.lock_state(attempt.id)
    except (OSError, UnsafePathError) as exc:
        view["lock"], view["lock_unreadable"] = "unreadable", unreadable_reason(exc)
    view["lock_holders"] = (
        find_lock_holders(receipts.lock_path(attempt.id)) if view["lock"] == "held" else []
    )
    return view


def _process(attempt: Attempt) -> str:
    if attempt.handle is None:
        return "no_handle"
    try:
        handle = ProcessHandle.decode(attempt.handle)
    except HandleCodecError:
        return "corrupt_handle"  # never probed, never signalled: the lock decides
    try:
        verdict = probe_handle(handle)
    except ProcessIdentityError:
        return "unknown"
    if verdict == Liveness.ALIVE and is_wrapper_of(handle.pid, attempt.id) is False:
        return "not_the_wrapper"  # a live process, but not launched for this attempt
    return verdict
