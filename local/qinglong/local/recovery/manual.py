"""Manual recovery: an operator settles runs that a stopped owner left active.

DESIGN.md §3.4 ("Operators get a command to see and resolve such runs") and issue 3 item 5.
Receipt first, as everywhere: a trusted receipt settles the attempt with its real exit code
whatever the operator asked; without one, a process of the attempt that may still live
(same boot/pid/start ticks, or a held attempt lock) refuses the resolution; only then is the
operator's verdict (``lost`` or ``failed``) recorded, with who and when, as events.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass

from qinglong.local.process.lock_holders import find_lock_holders
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.recovery.reconciler import receipt_outcome
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import ConflictError, ReceiptCodecError, ValidationError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.identity import Liveness, probe_handle
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
    """Settle every active attempt of ``run_id`` and the run itself.

    Raises:
        ValidationError: ``verdict`` is not ``lost`` or ``failed``.
        NotFoundError: no such run.
        ConflictError: the run is not active, or a process of an attempt may still live.
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
        handle = ProcessHandle.decode(attempt.handle) if attempt.handle else None
        try:
            receipt = receipts.read(attempt.id)
        except ReceiptCodecError:
            receipt = None
        if receipt is not None and handle is not None and receipt.handle == handle:
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
        if handle is not None and probe_handle(handle) in (Liveness.ALIVE, Liveness.REGROUPED):
            raise ConflictError("a process of this run is still running; stop it first")
        if receipts.lock_held(attempt.id):
            pids = find_lock_holders(receipts.lock_path(attempt.id))
            raise ConflictError(
                "a process of this run still holds its attempt lock (pids "
                f"{', '.join(map(str, pids)) or 'unknown'}); stop it first"
            )
        settled = repo.finish_attempt(
            attempt, VERDICTS[verdict],
            detail={"resolved_by": who, "source": "operator", "verdict": verdict},
        )
        status = settled.status.value
    if repo.get_run(run_id).status in RUN_ACTIVE:  # no active attempt was left to settle
        raise ConflictError("the run has no active attempt to resolve")
    return Resolution(run_id, status, source)
