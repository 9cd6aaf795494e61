"""The receipt-first startup reconciler (docs/protocols.md §3.4 steps 1-4; ADR-0067, ADR-0068).

For each runtime-owned run left in dispatching/running (at most 256, by run id), each
active attempt is decided from durable facts, in this order:

1. a trusted receipt (decodes, and names this run, attempt and handle) settles the attempt
   and the run in one transaction with both events; then the receipt file is deleted; then
   the journal row is resolved (kept while the lock stays held). Before the commit, when the
   attempt lock is still held (a process that escaped the group outlived the wrapper), its
   holders get TERM, the grace, KILL and an event, as after any exit (issue 10 item 5);
2. an invalid receipt is quarantined (intent persisted first, then the move) and the attempt
   is decided as if it had none;
3. no receipt: the handle is compared with the machine. Another boot, no such pid or other
   start ticks: gone; a zombie: exited without publishing. Either is ``lost`` — unless the
   receipt appeared meanwhile (checked again) or the attempt lock is still held (escaped
   processes: insufficient evidence, never "lost and done"). The same live process: keep it
   ``running`` and re-attach a monitor;
4. a start intent without a handle: a ``not_started`` receipt or a free attempt lock means
   no user code ever ran (the start gate) → ``lost``, eligible for retry; a held lock is
   insufficient evidence.

Truncation, storage errors, malformed rows or insufficient evidence raise
:class:`LocalApplicationStartupRecoveryRequiredError` with counts only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from qinglong.local.process.leftovers import ReceiptStoreLock
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.process.wrapper_identity import is_wrapper_of
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.backoff import retry_not_before_ms
from qinglong.shared.domain import Attempt, Run, Task
from qinglong.shared.errors import (
    HandleCodecError,
    LocalApplicationStartupRecoveryRequiredError,
    ProcessIdentityError,
    QinglongError,
    ReceiptCodecError,
)
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.identity import Liveness, probe_handle
from qinglong.shared.process.leftovers import stop_leftovers
from qinglong.shared.receipts import CompletionReceipt, ReceiptOutcome
from qinglong.shared.statuses import (
    ATTEMPT_ACTIVE,
    RETRYABLE_ATTEMPT_OUTCOMES,
    AttemptStatus,
)

log = logging.getLogger(__name__)

RECOVERY_LIMIT = 256

Quarantine = Callable[[str, str], object]  # (run id, attempt id)


@dataclass
class ReconcileResult:
    """Counts of one pass, and the attempts whose live wrapper must be re-attached.

    ``undecided_attempts``: active attempts of the runs left undecided (insufficient
    evidence or an error), for the startup refusal; ``page_failed``: the candidate page
    itself could not be read (issue 10 item 7)."""

    candidates: int = 0
    settled_from_receipt: int = 0
    lost: int = 0
    quarantined: int = 0
    leftovers_stopped: int = 0
    leftovers_unresolved: int = 0
    insufficient: int = 0
    errors: int = 0
    truncated: bool = False
    undecided_attempts: int = 0
    page_failed: bool = False
    reattach: list[tuple[Run, Task, Attempt]] = field(default_factory=list)

    @property
    def safe(self) -> bool:
        """True when every candidate was decided and nothing was left unseen."""
        return not (self.truncated or self.insufficient or self.errors)


class _InsufficientEvidenceError(Exception):
    """This attempt lacks the evidence to decide it (counted, never raised out)."""


class LocalRunReconciler:
    """Decides leftover runs from receipts and process identity (see module docstring).

    ``quarantine(run_id, attempt_id)`` persists the quarantine intent and moves an invalid receipt
    away (ADR-0069 §3); ``retry_base_s``/``retry_cap_s`` as for the coordinator; ``grace_s``:
    seconds between TERM and KILL for processes left holding a settled attempt's lock.
    ``on_settled(run)``: called after each terminal commit with the run as it then stands
    (failure notifications, issue 12 item 9); it must not block or raise.
    """

    def __init__(
        self,
        repo: LocalRunRepository,
        receipts: ReceiptStore,
        quarantine: Quarantine,
        *,
        retry_base_s: float = 5.0,
        retry_cap_s: float = 600.0,
        grace_s: float = 5.0,
        on_settled: Callable[[Run], None] | None = None,
    ) -> None:
        self.repo = repo
        self.receipts = receipts
        self.quarantine = quarantine
        self.on_settled = on_settled
        self.retry_base_s = retry_base_s
        self.retry_cap_s = retry_cap_s
        self.grace_s = grace_s

    def reconcile(self, skip: Callable[[str], bool] = lambda run_id: False) -> ReconcileResult:
        """One pass over at most 256 candidates. Never raises for one run's trouble: it is
        counted; :meth:`require_safe` turns the result into the startup decision.
        ``skip(run_id)`` True: the run is already supervised here (re-attached)."""
        result = ReconcileResult()
        try:
            page = self.repo.inspect_candidates(RECOVERY_LIMIT)
        except QinglongError:
            result.errors += 1
            result.page_failed = True
            return result
        result.truncated = page.truncated
        result.candidates = len(page.candidates)
        for candidate in page.candidates:
            if skip(candidate.run_id):
                continue
            settled = result.settled_from_receipt + result.lost
            try:
                self._run(candidate.run_id, result)
            except (_InsufficientEvidenceError, QinglongError) as exc:
                if isinstance(exc, _InsufficientEvidenceError):
                    result.insufficient += 1
                else:
                    log.error("recovery of a run failed: %s", exc.code)
                    result.errors += 1
                done = result.settled_from_receipt + result.lost - settled  # before it failed
                result.undecided_attempts += max(candidate.active_attempt_count - done, 0)
        return result

    @staticmethod
    def require_safe(result: ReconcileResult) -> None:
        """Raise LocalApplicationStartupRecoveryRequiredError unless ``result.safe``: counts
        of the runs left undecided and their active attempts (settled runs are not counted),
        a lower bound ("or more") when the page was truncated (the unseen runs count as at
        least one) or unreadable."""
        if not result.safe:
            undecided = result.insufficient + result.errors - int(result.page_failed)
            raise LocalApplicationStartupRecoveryRequiredError(
                candidates=undecided + int(result.truncated),
                active_attempts=result.undecided_attempts,
                truncated=result.truncated or result.page_failed,
            )

    # -- one run ------------------------------------------------------------------------

    def _run(self, run_id: str, result: ReconcileResult) -> None:
        run = self.repo.get_run(run_id)
        task = self.repo.get_task_by_id(run.task_id)
        active = [a for a in run.attempts if a.status in ATTEMPT_ACTIVE]
        if not active:
            raise _InsufficientEvidenceError  # malformed: an active run with no active attempt
        for attempt in active:
            self._attempt(run, task, attempt, result)

    def _attempt(self, run: Run, task: Task, attempt: Attempt, result: ReconcileResult) -> None:
        handle = self._handle(attempt)
        receipt = self._trusted_receipt(run, attempt, handle, result)  # steps 1-2
        if receipt is not None:
            self._settle_from_receipt(run, task, attempt, receipt, result)
            result.settled_from_receipt += 1
            return
        if handle is None:  # step 4: a start intent (or a bare claim) without a handle
            if self.receipts.lock_held(attempt.id):
                raise _InsufficientEvidenceError
            self._lost(run, task, attempt, "never_started")
            result.lost += 1
            return
        try:  # step 3: compare the handle with the machine
            verdict = probe_handle(handle)
        except ProcessIdentityError:
            raise _InsufficientEvidenceError from None
        if verdict == Liveness.ALIVE:
            # the verifiers must agree (docs/protocols.md §3.4): a handle whose live process was not
            # started as this attempt's wrapper (a corrupted or copied row) is never
            # re-attached, so nothing is ever signalled through it
            if is_wrapper_of(handle.pid, attempt.id) is not True:
                raise _InsufficientEvidenceError
            result.reattach.append((run, task, attempt))
            return
        if verdict == Liveness.REGROUPED:
            raise _InsufficientEvidenceError
        # gone or zombie: look once more for a receipt published in between
        receipt = self._trusted_receipt(run, attempt, handle, result)
        if receipt is not None:
            self._settle_from_receipt(run, task, attempt, receipt, result)
            result.settled_from_receipt += 1
            return
        if self.receipts.lock_held(attempt.id):
            # the leader is gone but processes of the attempt live on: escaped, not done
            raise _InsufficientEvidenceError
        self._lost(run, task, attempt, "zombie_without_receipt" if verdict == Liveness.ZOMBIE
                   else "process_gone")
        result.lost += 1

    @staticmethod
    def _handle(attempt: Attempt) -> ProcessHandle | None:
        if attempt.handle is None:
            return None
        try:
            return ProcessHandle.decode(attempt.handle)
        except HandleCodecError:
            raise _InsufficientEvidenceError from None

    def _trusted_receipt(
        self, run: Run, attempt: Attempt, handle: ProcessHandle | None, result: ReconcileResult
    ) -> CompletionReceipt | None:
        try:
            receipt = self.receipts.read(attempt.id)
        except ReceiptCodecError:
            receipt = None
            invalid = True
        else:
            invalid = receipt is not None and not _matches(receipt, run, attempt, handle)
        if invalid:
            self.quarantine(run.id, attempt.id)  # ADR-0069 §3: intent first, then the move
            result.quarantined += 1
            return None
        return receipt

    # -- settling -----------------------------------------------------------------------

    def _settle_from_receipt(
        self, run: Run, task: Task, attempt: Attempt, receipt: CompletionReceipt,
        result: ReconcileResult,
    ) -> None:
        outcome, code, signal = receipt_outcome(receipt, run, attempt)
        # Leftovers first, as the coordinator does: a crash in between leaves the run active,
        # so the next start stops (or finds gone) the rest and settles it then.
        held = self._stop_leftovers(run, attempt, result)
        self._finish(run, task, attempt, outcome, exit_code=code, signal=signal,
                     finished_at_ms=receipt.finished_at_ms, detail={"source": "receipt"})
        # ADR-0069 §3: the terminal commit, then delete the receipt, then resolve the row
        self.receipts.delete(attempt.id)
        if held:
            return  # the lock stays held: the row stays for the cleanup scanner
        self.repo.resolve_journal(attempt.id)
        self._discard_lock(attempt.id)

    def _stop_leftovers(self, run: Run, attempt: Attempt, result: ReconcileResult) -> bool:
        """Issue 10 item 5: the wrapper published its receipt, yet processes of the attempt
        may still hold its lock. Stop them (lock holders only: the group id of a wrapper we
        never reaped is not pinned) and record it. True when the lock is still held."""
        report = stop_leftovers(ReceiptStoreLock(self.receipts, attempt.id), pgid=None,
                                grace_s=self.grace_s)
        event = report.event()
        if event is None:
            return False
        log.warning("run %s (settling from its receipt): %s", run.id, report.describe())
        self.repo.record_leftovers(run.id, attempt.id, *event)
        result.leftovers_unresolved += report.unresolved
        result.leftovers_stopped += not report.unresolved
        return report.unresolved

    def _lost(self, run: Run, task: Task, attempt: Attempt, reason: str) -> None:
        self._finish(run, task, attempt, AttemptStatus.LOST, detail={"source": reason})
        self._discard_lock(attempt.id)

    def _finish(self, run: Run, task: Task, attempt: Attempt, outcome: AttemptStatus,
                **kwargs: object) -> None:
        retry_at = retry_not_before_ms(
            outcome_retryable=outcome in RETRYABLE_ATTEMPT_OUTCOMES,
            attempt_number=attempt.number,
            max_attempts=task.max_attempts,
            cancel_requested=run.cancel_requested,
            now_ms=self.repo.clock(),
            base_s=self.retry_base_s,
            cap_s=self.retry_cap_s,
        )
        settled = self.repo.finish_attempt(attempt, outcome, retry_not_before_ms=retry_at,
                                           **kwargs)  # type: ignore[arg-type]
        if self.on_settled is not None:
            self.on_settled(settled)

    def _discard_lock(self, attempt_id: str) -> None:
        try:
            self.receipts.discard_lock(attempt_id)
        except (OSError, QinglongError):
            log.warning("could not remove the lock file of attempt %s", attempt_id)


def receipt_outcome(
    receipt: CompletionReceipt, run: Run, attempt: Attempt
) -> tuple[AttemptStatus, int | None, int | None]:
    """(attempt status, exit code, signal) that a trusted receipt proves: exit 0 succeeded;
    ``not_started`` lost; under a cancel intent cancelled; a signal death past the stored
    deadline timed out; anything else failed (docs/protocols.md §3.4 step 1)."""
    code = receipt.wait_exit_code
    signal = receipt.signal if receipt.outcome is ReceiptOutcome.SIGNALED else None
    if receipt.outcome is ReceiptOutcome.NOT_STARTED:
        return AttemptStatus.LOST, None, None
    if code == 0:
        return AttemptStatus.SUCCEEDED, code, signal
    if run.cancel_requested:  # stopped on request (a drain or cancel): not a failure
        return AttemptStatus.CANCELLED, code, signal
    if (signal is not None and attempt.deadline_at_ms is not None
            and receipt.finished_at_ms >= attempt.deadline_at_ms):
        return AttemptStatus.TIMED_OUT, code, signal
    return AttemptStatus.FAILED, code, signal


def _matches(
    receipt: CompletionReceipt, run: Run, attempt: Attempt, handle: ProcessHandle | None
) -> bool:
    """The receipt names this run and attempt, and (when a handle was saved) this handle."""
    if receipt.run_id != run.id or receipt.attempt_id != attempt.id:
        return False
    return handle is None or receipt.handle == handle
