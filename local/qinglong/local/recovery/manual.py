"""Manual recovery: an operator settles runs that a stopped owner left active.

docs/protocols.md §3.4 ("Operators get a command to see and resolve such runs") and issue 3 item 5.
Receipt first, as everywhere: a trusted receipt settles the attempt with its real exit code
whatever the operator asked; without one, a process of the attempt that may still live
(same boot/pid/start ticks, or a held attempt lock) refuses the resolution; only then is the
operator's verdict (``lost`` or ``failed``) recorded, with who and when, as events.

A corrupt stored handle (pgid 0 or 1, a pid out of range, garbage; issue 10 item 7, case
C20) is never probed and never signalled: the attempt lock alone decides, its path derived
from the attempt id and the receipt shard. Held → :class:`AttemptLockHeldError`; free →
settled with an event saying the handle was corrupt and the lock free. A missing lock file
counts as free and is recorded as ``missing``: the wrapper creates the file before the start
gate and the runtime only ever removes it while holding it free, so a missing file means no
process of the attempt took it, or none was left when it was removed (a process that
outlived an outside deletion of its lock file is beyond what any file can show).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass

from qinglong.local.process.paths import UnsafePathError
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.process.wrapper_identity import is_wrapper_of
from qinglong.local.recovery.evidence import unreadable_reason
from qinglong.local.recovery.reconciler import receipt_outcome
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Attempt, Run
from qinglong.shared.errors import (
    AttemptLockHeldError,
    ConflictError,
    EvidenceUnreadableError,
    HandleCodecError,
    ReceiptCodecError,
    ValidationError,
)
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.identity import Liveness, probe_handle
from qinglong.shared.process.lock_holders import find_lock_holders
from qinglong.shared.receipts import CompletionReceipt
from qinglong.shared.statuses import ATTEMPT_ACTIVE, RUN_ACTIVE, AttemptStatus

VERDICTS = {"lost": AttemptStatus.LOST, "failed": AttemptStatus.FAILED}


@dataclass(frozen=True, slots=True)
class Resolution:
    """What happened to one run: ``source`` is ``receipt`` or ``operator``."""

    run_id: str
    status: str
    source: str


def operator_name() -> str:
    """``user (uid N)`` of the process resolving."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = "unknown"
    return f"{name} (uid {os.getuid()})"


def resolve_run(
    repo: LocalRunRepository, receipts: ReceiptStore, run_id: str, verdict: str
) -> Resolution:
    """Settle every active attempt of ``run_id`` and the run itself (docs/protocols.md §3.4).

    Per active attempt: a trusted receipt (this run and attempt, and the stored handle
    when one decodes) settles it with its real outcome; else a held attempt lock refuses
    (as "still running" while the handle names this attempt's live wrapper, told by its
    launch environment, ``wrapper_identity.py``); else the verdict is recorded. A handle
    whose live process is not this attempt's wrapper (a corrupted or copied row) is decided
    by the lock, and the event says ``handle: not_the_wrapper``. A corrupt handle is
    decided by the lock alone (issue 10 item 7; module docstring). Nothing is ever
    signalled.

    Raises:
        ValidationError: ``verdict`` is not ``lost`` or ``failed``.
        NotFoundError: no such run.
        AttemptLockHeldError: a process of the attempt still holds its lock.
        EvidenceUnreadableError: the attempt's receipt or lock cannot be read safely.
        ConflictError: the run is not active, or its process (valid handle) still runs.
    """
    if verdict not in VERDICTS:
        raise ValidationError("as", "must be lost or failed")
    run = repo.get_run(run_id)
    if run.status not in RUN_ACTIVE:
        raise ConflictError("the run is not in dispatching or running")
    who = operator_name()
    source = "operator"
    status = run.status.value
    for attempt in run.attempts:
        if attempt.status not in ATTEMPT_ACTIVE:
            continue
        handle, corrupt = _stored_handle(attempt)
        receipt = _receipt(receipts, attempt)
        if receipt is not None and _trusted(receipt, run, handle):
            outcome, code, sig = receipt_outcome(receipt, run, attempt)
            settled = repo.finish_attempt(
                attempt, outcome, exit_code=code, signal=sig,
                finished_at_ms=receipt.finished_at_ms,
                detail={"resolved_by": who, "source": "receipt"},
            )
            receipts.delete(attempt.id)
            repo.resolve_journal(attempt.id)
            source, status = "receipt", settled.status.value
            continue
        lock = _lock_state(receipts, attempt)
        alive = handle is not None and probe_handle(handle) in (Liveness.ALIVE,
                                                                Liveness.REGROUPED)
        if alive and handle is not None and is_wrapper_of(handle.pid, attempt.id) is not False:
            # this attempt's wrapper (or a process that cannot be told from it) still runs,
            # perhaps still starting, before it takes its lock
            raise ConflictError("a process of this run is still running; stop it first")
        if lock == "held":
            raise AttemptLockHeldError(find_lock_holders(receipts.lock_path(attempt.id)))
        detail: dict[str, object] = {"resolved_by": who, "source": "operator",
                                     "verdict": verdict}
        if corrupt:  # C20: the lock alone decided; say so in the event
            detail.update(handle="corrupt", lock=lock)
        elif alive:  # a live wrapper holds its lock: this handle names another process
            detail.update(handle="not_the_wrapper", lock=lock)
        settled = repo.finish_attempt(attempt, VERDICTS[verdict], detail=detail)
        status = settled.status.value
    if repo.get_run(run_id).status in RUN_ACTIVE:  # no active attempt was left to settle
        raise ConflictError("the run has no active attempt to resolve")
    return Resolution(run_id, status, source)


def _stored_handle(attempt: Attempt) -> tuple[ProcessHandle | None, bool]:
    """(the decoded handle or None, whether a stored handle failed to decode)."""
    if attempt.handle is None:
        return None, False
    try:
        return ProcessHandle.decode(attempt.handle), False
    except HandleCodecError:
        return None, True


def _receipt(receipts: ReceiptStore, attempt: Attempt) -> CompletionReceipt | None:
    """The decoded receipt; None when absent or invalid (the lock decides then).

    Raises EvidenceUnreadableError when the shard cannot be opened safely or read."""
    try:
        return receipts.read(attempt.id)
    except ReceiptCodecError:
        return None
    except (OSError, UnsafePathError) as exc:
        raise EvidenceUnreadableError("receipt", unreadable_reason(exc)) from None


def _trusted(receipt: CompletionReceipt, run: Run, handle: ProcessHandle | None) -> bool:
    """The receipt names this run (the store checked the attempt) and, when a handle
    decodes, this handle: the reconciler's rule (docs/protocols.md §3.4 steps 1 and 4)."""
    return receipt.run_id == run.id and (handle is None or receipt.handle == handle)


def _lock_state(receipts: ReceiptStore, attempt: Attempt) -> str:
    """held|free|missing; EvidenceUnreadableError when it cannot be probed safely."""
    try:
        return receipts.lock_state(attempt.id)
    except (OSError, UnsafePathError) as exc:
        raise EvidenceUnreadableError("attempt lock", unreadable_reason(exc)) from None
