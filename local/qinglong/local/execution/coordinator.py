"""The execution coordinator: one place for each step of a local attempt's life.

ADR-0069 §2 and docs/protocols.md §3.2–§3.3, coordinator side:

1. claim (run ``queued -> dispatching``, attempt ``claimed``)
2. persist the start intent with the durable deadline (attempt ``starting``)
3. launch (the launcher validates, registers the receipt journal, spawns, captures identity)
4. save the handle by compare-and-set (attempt and run ``running``); if that write fails,
   compensate: abandon the start gate (no user code ran) and kill the exact process group
5. open the start gate: user code starts only now
6. monitor: on exit stop what the attempt left behind (``shared/process/leftovers.py``:
   TERM, grace, KILL, an event; issue 10 item 5), read the receipt, commit the terminal transition
   with both events, delete the receipt file, resolve the journal row. Timeout and cancel:
   TERM to the wrapper, a grace period, KILL to the group.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from qinglong.local.process.launcher import LaunchedProcess, LaunchRequest, LocalProcessLauncher
from qinglong.local.process.leftovers import ReceiptStoreLock
from qinglong.local.process.reattached import ReattachedProcess
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.local.storage.secrets import SecretVariableMissingError
from qinglong.shared.backoff import retry_not_before_ms
from qinglong.shared.domain import Attempt, Run, Task
from qinglong.shared.errors import ConcurrentUpdateError, QinglongError, ReceiptCodecError
from qinglong.shared.faults import fault_point
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.leftovers import stop_leftovers
from qinglong.shared.receipts import CompletionReceipt, ReceiptOutcome
from qinglong.shared.statuses import (
    ATTEMPT_TERMINAL,
    RETRYABLE_ATTEMPT_OUTCOMES,
    AttemptStatus,
)

log = logging.getLogger(__name__)

GRACE_S_DEFAULT = 5.0
POLL_S = 0.2
SETTLE_RETRY_FIRST_S = 1.0
SETTLE_RETRY_MAX_S = 30.0


def run_label(run: Run, task: Task) -> str:
    """How ``serve``'s log lines name a run: ``京东签到#3`` as people type it (``TASK#N``),
    or ``TASK run …<last 8 hex digits>`` for a run without a number."""
    if run.number is not None:
        return f"{task.name}#{run.number}"
    return f"{task.name} run …{run.id[-8:]}"


@dataclass(frozen=True, slots=True)
class ExecutionConfig:
    """Settings of the coordinator.

    ``log_root``: absolute directory of attempt logs. ``default_cwd``: working directory of
    tasks without ``cwd`` (the runtime user's home, as cron does). ``grace_s``: seconds
    between TERM and KILL on timeout, cancel or drain. ``base_env``: variables every command gets
    (``PATH``, ``HOME``, ``LANG``: see
    :func:`qinglong.local.app.settings.runtime_base_env`); ``base_env_source``: when
    set, called at every start instead of ``base_env`` (a changed data-directory ``PATH``
    applies to the next attempt); ``global_env``: user-wide variables.
    ``global_env_source``: when set, called at every start for the current user-wide
    variables instead of ``global_env`` (so a change applies to the next attempt); it may
    raise QinglongError, and then the run stays queued. ``global_secret_names_source``: the
    names of the user-wide variables marked secret, read right after them; those the task's
    own env does not override are masked in the attempt's log like the task's secrets
    (docs/operations.md "Secrets in output"). ``secret_env_source``: a task's
    secret variables (migration 0006), resolved at every start; a SecretVariableMissingError
    fails the attempt (its code and the names in the event, never a value). Precedence, last
    wins: base, global, the task's env, the task's secrets. Values are secrets: never logged.
    """

    log_root: str
    grace_s: float = GRACE_S_DEFAULT
    base_env: dict[str, str] = field(default_factory=dict)
    global_env: dict[str, str] = field(default_factory=dict)
    global_env_source: Callable[[], dict[str, str]] | None = None
    base_env_source: Callable[[], dict[str, str]] | None = None
    global_secret_names_source: Callable[[], Iterable[str]] | None = None
    secret_env_source: Callable[[Task], dict[str, str]] | None = None
    retry_base_s: float = 5.0
    retry_cap_s: float = 600.0
    default_cwd: str | None = None


class _Live:
    """In-memory state of one running attempt (the database holds the durable facts)."""

    def __init__(
        self, run: Run, task: Task, attempt: Attempt, proc: LaunchedProcess | ReattachedProcess
    ) -> None:
        self.run = run
        self.task = task
        self.attempt = attempt
        self.proc = proc
        self.stop_reason: AttemptStatus | None = None
        self.wake = threading.Event()
        self.thread: threading.Thread | None = None


class ExecutionCoordinator:
    """Starts, supervises and settles local attempts.

    ``on_settled(run)`` is called (from a monitor thread) after each attempt's terminal
    commit, so a dispatcher can start waiting runs. Thread-safe.
    """

    def __init__(
        self,
        repo: LocalRunRepository,
        launcher: LocalProcessLauncher,
        receipts: ReceiptStore,
        config: ExecutionConfig,
        on_settled: Callable[[Run], None] | None = None,
    ) -> None:
        self.repo = repo
        self.launcher = launcher
        self.receipts = receipts
        self.config = config
        self.on_settled = on_settled
        self._lock = threading.Lock()
        self._live: dict[str, _Live] = {}
        self._detached = threading.Event()
        self._stopping = threading.Event()  # drain or detach began: stop retrying settles

    # -- start ----------------------------------------------------------------------------

    def log_path(self, task: Task, attempt: Attempt) -> str:
        """``<log_root>/<task id>/<run id>.<attempt number>.log``."""
        return os.path.join(
            self.config.log_root, task.id, f"{attempt.run_id}.{attempt.number}.log"
        )

    def _user_env(self, task: Task) -> tuple[dict[str, str], set[str]]:
        """The environment before the task's secrets, and the names in it whose values are
        secret global variables (not overridden by the task's env)."""
        base = self.config.base_env_source
        env = dict(self.config.base_env if base is None else base())
        source = self.config.global_env_source
        shared = self.config.global_env if source is None else source()
        env.update(shared)
        env.update(task.env)
        names = self.config.global_secret_names_source
        secret = set() if names is None else {
            n for n in names() if n in shared and n not in task.env}
        return env, secret

    def _secret_env(self, task: Task) -> dict[str, str]:
        source = self.config.secret_env_source
        return {} if source is None else source(task)

    def start(self, run: Run, task: Task) -> Run:
        """Start the next attempt of a queued run; returns the run as it then stands.

        A launch failure settles the attempt as ``failed`` (retried if the task allows)
        and is not raised. Raises ConcurrentUpdateError if the run moved meanwhile.
        """
        # read before the claim: a failure leaves the run queued
        env, shared_secret = self._user_env(task)
        missing: SecretVariableMissingError | None = None
        secret_names = tuple(sorted(shared_secret))
        try:
            secret = self._secret_env(task)
            env.update(secret)
            secret_names = tuple(sorted(shared_secret | set(secret)))
        except SecretVariableMissingError as exc:  # a user error: fail it, do not loop
            missing = exc
        attempt = self.repo.claim_attempt(run)  # step 1
        now = self.repo.clock()
        deadline = None if task.timeout_s is None else now + round(task.timeout_s * 1000)
        log_path = self.log_path(task, attempt)
        attempt = self.repo.record_start_intent(  # step 2
            attempt, log_path=log_path, deadline_at_ms=deadline
        )
        if missing is not None:
            log.warning("%s not started: %s", run_label(run, task), missing)
            return self._settle(attempt, task, AttemptStatus.FAILED, detail={
                "launch_error": missing.code, "secret": missing.env_name,
                "variable": missing.variable})
        request = LaunchRequest(
            run_id=run.id,
            attempt_id=attempt.id,
            argv=tuple(task.argv),
            env=env,
            cwd=task.cwd or self.config.default_cwd or self.config.log_root,
            output_path=log_path,
            secret_names=secret_names,
        )
        try:
            proc = self.launcher.start(request)  # step 3: ADR-0069 §2 steps 1-6
        except QinglongError as exc:
            log.warning("%s: launch failed: %s", run_label(run, task), exc.code)
            return self._settle(
                attempt, task, AttemptStatus.FAILED,
                # the message names what failed (a deleted cwd, say: issue 12 item 10); it
                # never holds a variable's value (launch_request.py)
                detail={"launch_error": exc.code, "launch_step": getattr(exc, "step", None),
                        "launch_message": str(exc)},
            )
        fault_point("after_spawn")
        try:
            attempt = self.repo.save_handle(attempt, proc.handle.encode())  # step 4
        except BaseException:
            # Compensation: the gate never opens, so no user code ran; kill the exact group.
            proc.abandon_gate()
            with contextlib.suppress(QinglongError, OSError):
                proc.kill_group()
            proc.wait(None)
            proc.close()
            raise
        live = _Live(run, task, attempt, proc)
        with self._lock:
            self._live[attempt.id] = live
        fault_point("before_gate")
        proc.open_gate()  # step 5: user code may start now
        fault_point("after_gate")
        live.thread = threading.Thread(
            target=self._monitor, args=(live,), name=f"ql3-attempt-{attempt.id[-6:]}", daemon=True
        )
        live.thread.start()
        log.info("%s: attempt %d started", run_label(run, task), attempt.number)
        return self.repo.get_run(run.id)

    def reattach(self, run: Run, task: Task, attempt: Attempt) -> bool:
        """Supervise again an attempt whose wrapper outlived its owner (docs/protocols.md §3.4
        step 3): its stored deadline still applies. False if the process is gone (the
        caller settles it from facts instead)."""
        if attempt.handle is None:
            return False
        try:
            proc = ReattachedProcess(ProcessHandle.decode(attempt.handle))
        except QinglongError:
            return False
        live = _Live(run, task, attempt, proc)
        if run.cancel_requested:  # a cancel asked for while no owner ran still applies
            live.stop_reason = AttemptStatus.CANCELLED
        with self._lock:
            self._live[attempt.id] = live
        live.thread = threading.Thread(
            target=self._monitor, args=(live,), name=f"ql3-attempt-{attempt.id[-6:]}", daemon=True
        )
        live.thread.start()
        log.info("%s: re-attached to attempt %d", run_label(run, task), attempt.number)
        return True

    # -- supervise ------------------------------------------------------------------------

    def _monitor(self, live: _Live) -> None:
        """Wait for the wrapper; enforce the durable deadline and stop requests.

        Timeout/cancel: TERM to the wrapper alone (it forwards once to its group), then
        after ``grace_s`` KILL to the whole group (docs/protocols.md §3.3).
        """
        proc = live.proc
        # The durable deadline is wall time (it outlives this process); from here on the
        # time left is measured on CLOCK_BOOTTIME (monotonic, suspend included), so a step of
        # the wall clock neither delays nor hastens a timeout or the grace (issue 10 item 3).
        deadline: float | None = None
        if live.attempt.deadline_at_ms is not None:
            deadline = _boottime() + (live.attempt.deadline_at_ms - self.repo.clock()) / 1000
        term_sent_at: float | None = None
        killed = False
        while proc.wait(POLL_S) is None:
            if self._detached.is_set():
                return  # detach: the attempt runs on; the next start re-attaches it
            now = _boottime()
            if live.stop_reason is None and deadline is not None and now >= deadline:
                live.stop_reason = AttemptStatus.TIMED_OUT
            if live.stop_reason is not None and term_sent_at is None:
                with contextlib.suppress(QinglongError, OSError):
                    proc.send_graceful(signal.SIGTERM)
                term_sent_at = now
            elif (
                term_sent_at is not None
                and not killed
                and now >= term_sent_at + self.config.grace_s
            ):
                with contextlib.suppress(QinglongError, OSError):
                    proc.kill_group()
                killed = True
        self._finish(live)

    def _finish(self, live: _Live) -> None:
        fault_point("after_exit")
        proc = live.proc
        rc = proc.returncode
        # Issue 10 item 5: the leader is gone; what it left (group members, lock holders
        # that escaped the group) gets TERM, the grace, KILL, and is recorded. The group is
        # addressed only while our unreaped wrapper pins its id (never a re-attached one).
        self._stop_leftovers(live, pgid=None if isinstance(proc, ReattachedProcess)
                             else proc.handle.pgid)
        receipt: CompletionReceipt | None = None
        detail: dict[str, object] = {}
        try:
            receipt = self.receipts.read(live.attempt.id)
        except ReceiptCodecError:
            detail["receipt"] = "invalid"
        if receipt is not None and receipt.handle != proc.handle:
            detail["receipt"] = "identity_mismatch"
            receipt = None
        exit_code, sig = _exit_of(receipt, rc)
        if receipt is None and "receipt" not in detail:
            detail["receipt"] = "not_published"
            detail["wait_status"] = rc
        if live.stop_reason is not None:
            outcome = live.stop_reason
        elif receipt is not None and receipt.outcome is ReceiptOutcome.NOT_STARTED:
            outcome = AttemptStatus.LOST
        elif receipt is None and (rc is None or rc < 0):
            # The wrapper itself was killed before publishing (case C07): the user's exit
            # code is unknown, so none is invented.
            outcome, exit_code, sig = AttemptStatus.LOST, None, None
        elif exit_code == 0:
            outcome = AttemptStatus.SUCCEEDED
        else:
            outcome = AttemptStatus.FAILED
        finished = receipt.finished_at_ms if receipt is not None else None
        fault_point("after_receipt")
        try:
            delay = SETTLE_RETRY_FIRST_S
            while True:  # the store may be briefly unable to write (disk full): retry
                try:
                    self._settle(live.attempt, live.task, outcome, exit_code=exit_code,
                                 signal=sig, wait_status=rc, finished_at_ms=finished,
                                 detail=detail)
                    break
                except ConcurrentUpdateError:
                    if self.repo.get_attempt(live.attempt.id).status in ATTEMPT_TERMINAL:
                        # settled meanwhile by someone else (``recovery resolve``): whoever
                        # settled it owns the receipt and the journal row; stop retrying
                        log.warning("attempt %s was settled elsewhere", live.attempt.id)
                        return
                    raise
                except QinglongError as exc:
                    log.error("could not settle attempt %s (%s); retrying in %.0f s",
                              live.attempt.id, exc.code, delay)
                    if self._stopping.wait(delay):
                        return  # the next start settles it from the same durable facts
                    delay = min(delay * 2, SETTLE_RETRY_MAX_S)
            if receipt is not None:  # ADR-0069 §3: commit, then delete, then resolve
                fault_point("after_commit")
                self.receipts.delete(live.attempt.id)
                fault_point("after_delete")
                if self.receipts.lock_held(live.attempt.id):
                    # a process that left the group still lives: the journal row stays, so
                    # the cleanup scanner removes the lock file once it is free
                    return
                self.repo.resolve_journal(live.attempt.id)
            with contextlib.suppress(OSError, QinglongError):
                self.receipts.discard_lock(live.attempt.id)  # only if no process holds it
        except QinglongError as exc:
            log.error("could not clean up after attempt %s: %s", live.attempt.id, exc.code)
        finally:
            proc.close()
            with self._lock:
                self._live.pop(live.attempt.id, None)

    def _stop_leftovers(self, live: _Live, pgid: int | None) -> None:
        """Stop the attempt's leftovers and record the fact before the terminal commit, so
        the run never reads as a clean ``succeeded`` meanwhile (issue 10 item 5)."""
        report = stop_leftovers(ReceiptStoreLock(self.receipts, live.attempt.id), pgid=pgid,
                                grace_s=self.config.grace_s)
        event = report.event()
        if event is None:
            return
        log.warning("run %s of task %s: %s", live.run.id, live.task.name, report.describe())
        try:
            self.repo.record_leftovers(live.run.id, live.attempt.id, *event)
        except QinglongError as exc:
            log.error("could not record the leftovers of attempt %s: %s", live.attempt.id,
                      exc.code)

    def _settle(
        self,
        attempt: Attempt,
        task: Task,
        outcome: AttemptStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        wait_status: int | None = None,
        finished_at_ms: int | None = None,
        detail: dict[str, object] | None = None,
    ) -> Run:
        retry_at = None
        if outcome in RETRYABLE_ATTEMPT_OUTCOMES and attempt.number < task.max_attempts:
            retry_at = retry_not_before_ms(
                outcome_retryable=True,
                attempt_number=attempt.number,
                max_attempts=task.max_attempts,
                cancel_requested=self.repo.get_run(attempt.run_id).cancel_requested,
                now_ms=self.repo.clock(),
                base_s=self.config.retry_base_s,
                cap_s=self.config.retry_cap_s,
            )
        run = self.repo.finish_attempt(
            attempt, outcome, exit_code=exit_code, signal=signal, wait_status=wait_status,
            finished_at_ms=finished_at_ms, detail=detail, retry_not_before_ms=retry_at,
        )
        log.info("%s: attempt %d %s, run %s", run_label(run, task), attempt.number,
                 outcome.value, run.status.value)
        if self.on_settled is not None:
            self.on_settled(run)
        return run

    # -- stop -----------------------------------------------------------------------------

    def active_count(self) -> int:
        """Attempts this coordinator supervises right now."""
        with self._lock:
            return len(self._live)

    def is_live(self, run_id: str) -> bool:
        """True while an attempt of ``run_id`` is supervised here."""
        with self._lock:
            return any(live.run.id == run_id for live in self._live.values())

    def stop_run(self, run_id: str, reason: AttemptStatus = AttemptStatus.CANCELLED) -> bool:
        """TERM the live attempt of ``run_id`` (KILL after the grace). False if none here."""
        with self._lock:
            targets = [live for live in self._live.values() if live.run.id == run_id]
        for live in targets:
            if live.stop_reason is None:
                live.stop_reason = reason
        return bool(targets)

    def detach(self, timeout_s: float | None = None) -> int:
        """Stop supervising without touching the attempts (``serve --detach``, for
        upgrades): they keep running in their groups, publish their receipts, and the next
        start re-attaches or settles them. Returns how many were live."""
        self._detached.set()
        self._stopping.set()
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            if live.thread is not None:
                live.thread.join(timeout_s)
        return len(lives)

    def drain(self, timeout_s: float | None = None) -> int:
        """Cancel every live attempt (TERM, grace, KILL) and wait for the monitors.

        Returns how many attempts were still live when the drain began.
        """
        with self._lock:
            lives = list(self._live.values())
        for live in lives:
            if live.stop_reason is None:
                # the cancel intent is durable first: a crash mid-drain still ends cancelled
                with contextlib.suppress(QinglongError):
                    self.repo.request_cancel(live.run.id, reason="shutdown")
                live.stop_reason = AttemptStatus.CANCELLED
        for live in lives:
            if live.thread is not None:
                live.thread.join(timeout_s)
        self._stopping.set()
        return len(lives)


def _exit_of(receipt: CompletionReceipt | None, rc: int | None) -> tuple[int | None, int | None]:
    """(exit code, signal) from the receipt, else from the wrapper's wait status."""
    if receipt is not None:
        if receipt.outcome is ReceiptOutcome.SIGNALED and receipt.signal is not None:
            return 128 + receipt.signal, receipt.signal
        return receipt.exit_code, None
    if rc is None:
        return None, None
    if rc < 0:
        return 128 - rc, -rc
    return rc, None


def _boottime() -> float:
    """Seconds on ``CLOCK_BOOTTIME``: monotonic, and counting time suspended."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)
