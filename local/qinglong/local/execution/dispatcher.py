"""The dispatcher: starts due queued runs within the profile's concurrency cap (§3.7)."""

from __future__ import annotations

import logging

from qinglong.local.execution.coordinator import ExecutionCoordinator
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import ConcurrencyPolicy
from qinglong.shared.errors import ConcurrentUpdateError, NotFoundError

log = logging.getLogger(__name__)


class Dispatcher:
    """Starts queued runs whose ``not_before`` has come.

    ``max_concurrent`` caps running attempts (edge 2, standalone 8): every running attempt
    costs a wrapper process. A run of a task with an active run waits unless the task's
    policy is ``allow`` (``replace`` has already asked the active run to stop).
    """

    def __init__(
        self, repo: LocalRunRepository, coordinator: ExecutionCoordinator, max_concurrent: int
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        self.repo = repo
        self.coordinator = coordinator
        self.max_concurrent = max_concurrent

    def dispatch(self, now_ms: int, only_run_id: str | None = None) -> int:
        """Start what may start now; returns how many attempts were started."""
        started = 0
        # attempts supervised here: after startup recovery every active attempt of the
        # store is live here (re-attached), and none is counted twice mid-start
        free = self.max_concurrent - self.coordinator.active_count()
        if free <= 0:
            return 0
        if only_run_id is not None:
            run = self.repo.get_run(only_run_id)
            due = [run] if run.status.value == "queued" and run.not_before_ms <= now_ms else []
        else:
            due = self.repo.queued_due(now_ms, limit=max(free * 4, 16))
        for run in due:
            if free <= 0:
                break
            try:
                task = self.repo.get_task_by_id(run.task_id)
            except NotFoundError:
                continue
            if task.concurrency is not ConcurrencyPolicy.ALLOW and self.repo.active_runs(task.id):
                continue
            try:
                self.coordinator.start(run, task)
            except ConcurrentUpdateError:
                continue
            started += 1
            free -= 1
        return started
