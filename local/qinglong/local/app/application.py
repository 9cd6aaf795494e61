"""The composition root of the local profile (ADR-0069 §5, ADR-0067 §3, docs/protocols.md §3.6).

start: storage ready -> assembly (no side effects) -> startup recovery
       -> one bounded receipt cleanup page -> lifecycles (scheduler loop, cleanup, retention)
       -> admission (socket) -> active
stop:  admission drain -> cleanup and retention lifecycles
       -> stack (executions drained: TERM, grace, KILL) -> storage
"""

from __future__ import annotations

import logging
import os
import threading
import time

from qinglong.local.app import settings as keys
from qinglong.local.app.datadir import DataDir
from qinglong.local.app.notifier import Notifier
from qinglong.local.app.scripts_folder import ScriptsFolder
from qinglong.local.app.service import LocalService
from qinglong.local.app.store import LocalStore
from qinglong.local.execution.coordinator import ExecutionConfig, ExecutionCoordinator
from qinglong.local.execution.dispatcher import Dispatcher
from qinglong.local.process.launcher import LaunchConfig, LocalProcessLauncher
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.recovery.cleanup_scanner import (
    LocalCompletionReceiptCleanupScanner,
    PageResult,
    ScannerConfig,
)
from qinglong.local.recovery.lifecycle import CleanupLifecycle
from qinglong.local.recovery.quarantine import quarantine_receipt
from qinglong.local.recovery.reconciler import LocalRunReconciler, ReconcileResult
from qinglong.local.recovery.retention import (
    LocalRetention,
    RetentionConfig,
    RetentionLifecycle,
)
from qinglong.local.scheduling.scheduler import IDLE_WAKE_MS, Scheduler
from qinglong.local.storage.secrets import TaskSecretStore
from qinglong.shared.domain import Run
from qinglong.shared.errors import (
    LocalApplicationStartupRecoveryRequiredError,
    QinglongError,
)
from qinglong.shared.statuses import RUN_TERMINAL

log = logging.getLogger(__name__)

RECOVERY_PASSES = 3
LOOP_ERROR_BACKOFF_S = 1.0
def default_task_cwd(datadir: DataDir) -> str:
    """Where a task without ``--cwd`` runs: ``$HOME`` if it is a directory (as cron does),
    else the data directory."""
    home = os.environ.get("HOME", "")
    return home if os.path.isabs(home) and os.path.isdir(home) else datadir.root


class LocalStack:
    """Assembly: receipt store, launcher, coordinator, dispatcher, scheduler. Creating it
    starts nothing (no thread, no timer, no process)."""

    def __init__(self, store: LocalStore, grace_s: float | None = None) -> None:
        self.store = store
        repo = store.repo
        self.settled = threading.Condition()
        self.wake_event = threading.Event()
        self.receipts = ReceiptStore(store.datadir.receipt_root)
        # one folder object per stack: its lock serialises every save's version check
        self.scripts = ScriptsFolder(store.datadir.scripts_root)
        secrets = TaskSecretStore(repo.db, repo.clock)
        # Issue 12 item 9: notifications leave on one bounded queue, off the critical path;
        # started by ``serve`` (a foreground ``run`` does not notify).
        self.notifier = Notifier(
            repo, lambda: {**keys.task_path_env(repo.get_setting), **repo.global_variables()},
            keys.notify_cwd())
        self.launcher = LocalProcessLauncher(
            LaunchConfig(log_root=store.datadir.log_root, receipt_root=store.datadir.receipt_root,
                         log_cap_bytes=store.profile.log_cap_bytes),
            repo,
        )
        self.coordinator = ExecutionCoordinator(
            repo,
            self.launcher,
            self.receipts,
            ExecutionConfig(
                log_root=store.datadir.log_root,
                grace_s=store.profile.grace_s if grace_s is None else grace_s,
                # read at each start: PATH (issue 12 item 8), globals (migration 0002),
                # the task's secrets (migration 0006)
                base_env_source=lambda: keys.task_path_env(repo.get_setting),
                global_env_source=repo.global_variables,
                global_secret_names_source=repo.global_secret_names,
                secret_env_source=lambda task: secrets.resolve(task.id),
                default_cwd=default_task_cwd(store.datadir),
            ),
            on_settled=self._on_settled,
        )
        self.dispatcher = Dispatcher(repo, self.coordinator, store.profile.max_concurrent)
        self.scheduler = Scheduler(repo, self._stop_run)
        self.cleanup, self.retention = _maintenance(store)  # timers, not started

    def _notify(self, run: Run) -> None:
        self.notifier.submit(run)  # never blocks; ignores a run that will be retried

    def _on_settled(self, run: Run) -> None:
        self._notify(run)
        self.wake_event.set()
        with self.settled:
            self.settled.notify_all()

    def _stop_run(self, run_id: str) -> None:
        self.coordinator.stop_run(run_id)

    def stop_run(self, run_id: str) -> bool:
        """Ask the live attempt of ``run_id`` to stop; False if none is live here."""
        return self.coordinator.stop_run(run_id)

    def wake(self) -> None:
        """Wake the serve loop (a task or run changed)."""
        self.wake_event.set()

    def service(self) -> LocalService:
        """The operations, supervised by this stack."""
        return LocalService(
            self.store.repo, supervised=True, wake=self.wake, stop_run=self.stop_run,
            receipts=self.receipts, scripts=self.scripts,
        )

    def cleanup_startup_page(self) -> PageResult | None:
        """ADR-0069 §5: one bounded receipt cleanup page, after run recovery and before the
        lifecycles. Never raises (item failures are counted in the result)."""
        return self.cleanup.run_once()

    def start_maintenance(self) -> None:
        """Start the cleanup and retention timers (idempotent)."""
        self.cleanup.start()
        self.retention.start()

    def stop_maintenance(self) -> None:
        """Stop both timers, waiting at most the profile's stop budget in all (idempotent).
        Stop order: admission drain -> this -> stack -> storage (ADR-0069 §5)."""
        self.cleanup.request_stop()
        self.retention.request_stop()
        deadline = time.monotonic() + self.store.profile.stop_wait_s
        self.cleanup.stop(deadline - time.monotonic())
        self.retention.stop(deadline - time.monotonic())

    def recover(self, *, reattach: bool = True) -> ReconcileResult:
        """Receipt-first startup recovery (docs/protocols.md §3.4, ADR-0067 §3): settle what the
        facts decide, re-attach monitors to wrappers still alive.

        ``reattach=False`` (a foreground ``run``): live wrappers of an earlier owner are left
        alone for the next ``serve``. Raises LocalApplicationStartupRecoveryRequiredError
        (counts only) when anything stays undecided or more than 256 candidates exist.
        """
        repo, receipts = self.store.repo, self.receipts
        reconciler = LocalRunReconciler(
            repo, receipts, lambda run_id, attempt_id: quarantine_receipt(
                repo, receipts, run_id, attempt_id),
            grace_s=self.coordinator.config.grace_s,
            on_settled=self._notify,  # a run found lost at startup notifies too
        )
        left: set[str] = set()
        for _ in range(RECOVERY_PASSES):
            result = reconciler.reconcile(
                skip=lambda run_id: self.coordinator.is_live(run_id) or run_id in left
            )
            reconciler.require_safe(result)
            again = False
            for run, task, attempt in result.reattach:
                if not reattach:
                    left.add(run.id)
                elif not self.coordinator.reattach(run, task, attempt):
                    again = True  # it ended in between: the next pass settles it
            if not again:
                return result
        raise LocalApplicationStartupRecoveryRequiredError(
            candidates=len(result.reattach), active_attempts=len(result.reattach),
            truncated=False,
        )

    def run_loop(self, stop: threading.Event) -> None:
        """The serve lifecycle: fire due slots, dispatch queued runs, sleep until the
        earliest stored next fire time (one indexed MIN), a queued run's ``not_before`` or
        a wake-up, bounded by ``IDLE_WAKE_MS`` (5 s) so a wall-clock step is noticed soon
        (issue 10 items 1 and 3). It waits on ``threading.Event`` (monotonic timeouts),
        never ``time.sleep``: under libfaketime a sleep can fail."""
        repo = self.store.repo
        while not stop.is_set():
            now = repo.clock()
            try:
                wake_at = self.scheduler.tick(now)
                self.dispatcher.dispatch(now)
                queued_at = repo.next_queued_at()
            except QinglongError as exc:  # the loop survives; the store is the truth
                log.error("scheduler tick failed (%s); retrying in %.0f s", exc.code,
                          LOOP_ERROR_BACKOFF_S)
                stop.wait(LOOP_ERROR_BACKOFF_S)
                continue
            if queued_at is not None and queued_at > now:
                wake_at = min(wake_at, queued_at)
            # bounded: a wall-clock step between the tick and here must not stretch the
            # sleep (the next tick notices the step, issue 10 item 3)
            timeout = min(IDLE_WAKE_MS / 1000, max(0.0, (wake_at - repo.clock()) / 1000))
            self.wake_event.wait(timeout)
            self.wake_event.clear()

    def supervise(self, run_id: str, stop: threading.Event) -> Run:
        """Foreground supervision of one run (``ql3 local run`` with no ``serve``): start
        it, retries included, until it is terminal. ``stop`` set = cancel it."""
        repo = self.store.repo
        cancelled = False
        while True:
            run = repo.get_run(run_id)
            if run.status in RUN_TERMINAL:
                return run
            if stop.is_set() and not cancelled:
                cancelled = True
                repo.request_cancel(run_id, reason="interrupted")
                self.coordinator.stop_run(run_id)
                continue
            now = repo.clock()
            self.dispatcher.dispatch(now, only_run_id=run_id)
            wait_s = 0.2 if self.coordinator.is_live(run_id) else max(
                0.05, min(1.0, (run.not_before_ms - now) / 1000)
            )
            with self.settled:
                self.settled.wait(wait_s)


def _maintenance(store: LocalStore) -> tuple[CleanupLifecycle, RetentionLifecycle]:
    """The receipt cleanup and retention lifecycles of ``store``'s profile (no side
    effects: no thread, no file, no query until started)."""
    profile, repo = store.profile, store.repo
    scanner = LocalCompletionReceiptCleanupScanner(
        repo,
        ReceiptStore(store.datadir.receipt_root),
        ScannerConfig(profile.cleanup_page, profile.missing_receipt_retention_s),
    )
    retention = LocalRetention(
        repo,
        RetentionConfig(
            log_root=store.datadir.log_root,
            log_retention_days=profile.log_retention_days,
            history_retention_days=profile.history_retention_days,
            batch=profile.retention_batch,
        ),
    )
    return (
        CleanupLifecycle(scanner, tick_s=profile.cleanup_tick_s, stop_wait_s=profile.stop_wait_s),
        RetentionLifecycle(
            retention, tick_s=profile.retention_tick_s, stop_wait_s=profile.stop_wait_s
        ),
    )
