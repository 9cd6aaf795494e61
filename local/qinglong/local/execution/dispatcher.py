"""The dispatcher: starts due queued runs within the profile's concurrency cap (§3.7).

Fairness at the cap (issue 10 item 4): when fewer attempts may start than runs are due,
tasks take turns. The task whose last start here is the oldest (never started first) goes
next, and within a task its oldest due run; after a start the task goes to the back of the
line. A ``forbid``/``replace`` task with a run in dispatching/running is not startable; an
``allow`` task may run several at once but still takes its turn.
"""

from __future__ import annotations

import itertools
import logging

from qinglong.local.execution.coordinator import ExecutionCoordinator
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import ConcurrencyPolicy, Run
from qinglong.shared.errors import ConcurrentUpdateError, NotFoundError

log = logging.getLogger(__name__)

CANDIDATE_LIMIT = 256
"""Due runs read per dispatch, at most ``max_concurrent`` of each task (so one task's long
backlog never hides another task's due run)."""

MAX_REMEMBERED_TASKS = 4096
"""Tasks whose last start is remembered; beyond it the oldest half is forgotten."""


class Dispatcher:
    """Starts queued runs whose ``not_before`` has come, round-robin across tasks.

    ``max_concurrent`` caps running attempts (edge 2, standalone 8): every running attempt
    costs a wrapper process; < 1 raises ValueError. The order of turns lives in this object
    (a serve start begins with every task equal, oldest due run first).
    """

    def __init__(
        self, repo: LocalRunRepository, coordinator: ExecutionCoordinator, max_concurrent: int
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be >= 1")
        self.repo = repo
        self.coordinator = coordinator
        self.max_concurrent = max_concurrent
        self._turn = itertools.count(1)
        self._last_start: dict[str, int] = {}  # task id -> turn number of its last start

    def dispatch(self, now_ms: int, only_run_id: str | None = None) -> int:
        """Start what may start at ``now_ms`` (Unix ms), or only ``only_run_id`` (a
        foreground ``run``); returns how many attempts were started (docs/protocols.md §3.7,
        issue 10 item 4). Raises StorageError and friends from the repository."""
        # attempts supervised here: after startup recovery every active attempt of the
        # store is live here (re-attached), and none is counted twice mid-start
        free = self.max_concurrent - self.coordinator.active_count()
        if free <= 0:
            return 0
        if only_run_id is not None:
            due = self._only(only_run_id, now_ms)
        else:
            due = self.repo.startable_due(now_ms, limit=CANDIDATE_LIMIT,
                                           per_task=self.max_concurrent)
        rank = {run.id: i for i, run in enumerate(due)}  # oldest due first
        lines: dict[str, list[Run]] = {}
        for run in due:
            lines.setdefault(run.task_id, []).append(run)
        started = 0
        while free > 0 and lines:
            task_id = min(lines, key=lambda t: (self._last_start.get(t, 0), rank[lines[t][0].id]))
            run = lines[task_id].pop(0)
            policy = self._start(run)
            if policy is not None:
                started += 1
                free -= 1
                self._remember(task_id)
                if policy is not ConcurrencyPolicy.ALLOW:
                    lines[task_id].clear()  # one active run at most
            if not lines[task_id]:
                del lines[task_id]
        return started

    def _only(self, run_id: str, now_ms: int) -> list[Run]:
        run = self.repo.get_run(run_id)
        if run.status.value != "queued" or run.not_before_ms > now_ms:
            return []
        try:
            task = self.repo.get_task_by_id(run.task_id)
        except NotFoundError:
            return []
        if task.concurrency is not ConcurrencyPolicy.ALLOW and self.repo.active_runs(task.id):
            return []
        return [run]

    def _start(self, run: Run) -> ConcurrencyPolicy | None:
        """Start ``run``; its task's policy, or None if it did not start."""
        try:
            task = self.repo.get_task_by_id(run.task_id)
            self.coordinator.start(run, task)
        except (NotFoundError, ConcurrentUpdateError):
            return None
        return task.concurrency

    def _remember(self, task_id: str) -> None:
        self._last_start[task_id] = next(self._turn)
        if len(self._last_start) > MAX_REMEMBERED_TASKS:
            by_turn = sorted(self._last_start, key=self._last_start.__getitem__)
            for old in by_turn[: len(by_turn) // 2]:
                del self._last_start[old]

