"""The scheduler: turns due cron slots into queued runs (DESIGN.md §3.7).

A run is created at most once per (task, slot): the unique index on
``runs (task_id, scheduled_at_ms)`` decides, so a repeated tick can never fire twice.
Concurrency policy at a due slot: ``forbid`` skips it while the task has an unfinished run
(recorded as an event), ``allow`` queues it, ``replace`` queues it and asks the active runs
to stop (the dispatcher starts the new run only after their groups are gone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.cron import Schedule, parse_schedule
from qinglong.shared.domain import ConcurrencyPolicy, Task, Trigger
from qinglong.shared.errors import QinglongError

log = logging.getLogger(__name__)

IDLE_WAKE_MS = 60_000


class Scheduler:
    """Creates runs for due slots.

    ``stop_run(run_id)`` is called for the active runs of a ``replace`` task at a due slot.
    """

    def __init__(self, repo: LocalRunRepository, stop_run: Callable[[str], None]) -> None:
        self.repo = repo
        self.stop_run = stop_run
        self._cache: dict[str, tuple[tuple[str, str], Schedule]] = {}

    def _schedule(self, task: Task) -> Schedule | None:
        key = (task.schedule, task.timezone)
        cached = self._cache.get(task.id)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            schedule = parse_schedule(task.schedule, task.timezone)
        except QinglongError:
            log.warning("task %s has an invalid schedule; it never fires", task.id)
            return None
        self._cache[task.id] = (key, schedule)
        return schedule

    def boot(self, boot_ms: int) -> int:
        """Queue one run of every enabled ``@boot`` task for this serve start, under the
        task's concurrency policy (``forbid`` skips it while a run is unfinished)."""
        created = 0
        for task in self.repo.list_tasks():
            schedule = self._schedule(task)
            if not task.enabled or schedule is None or schedule.kind != "boot":
                continue
            if task.concurrency is ConcurrencyPolicy.FORBID and self.repo.has_unfinished_run(
                task.id
            ):
                self.repo.task_event(task.id, "slot_skipped",
                                     {"slot_ms": boot_ms, "reason": "forbid: a run is active"})
                continue
            if task.concurrency is ConcurrencyPolicy.REPLACE:
                supersede(self.repo, task.id, self.stop_run)
            if self.repo.create_run(task.id, Trigger.BOOT, scheduled_at_ms=boot_ms):
                created += 1
        return created

    def tick(self, now_ms: int) -> int:
        """Fire due slots; returns the Unix ms of the next slot of any task (capped at
        ``now + 60 s``) so the caller can sleep until then."""
        wake = now_ms + IDLE_WAKE_MS
        for task in self.repo.list_tasks():
            schedule = self._schedule(task)
            if not task.enabled or schedule is None or schedule.kind != "cron":
                continue
            cursor = task.schedule_cursor_ms
            if cursor is None:
                self.repo.set_schedule_cursor(task.id, now_ms)
                cursor = now_ms
            else:
                due = schedule.due(cursor, now_ms, task.misfire_grace_s * 1000)
                if due.fire_slot_ms is not None:
                    self._fire(task, due.fire_slot_ms)
                if due.new_cursor_ms != cursor or due.skipped:
                    self.repo.set_schedule_cursor(
                        task.id, due.new_cursor_ms, skipped=due.skipped, capped=due.skipped_capped
                    )
                    cursor = due.new_cursor_ms
            upcoming = schedule.next_slot_after(max(cursor, now_ms))
            if upcoming is not None:
                wake = min(wake, upcoming)
        return wake

    def _fire(self, task: Task, slot_ms: int) -> None:
        policy = task.concurrency
        if policy is ConcurrencyPolicy.FORBID and self.repo.has_unfinished_run(task.id):
            self.repo.task_event(
                task.id, "slot_skipped", {"slot_ms": slot_ms, "reason": "forbid: a run is active"}
            )
            return
        if policy is ConcurrencyPolicy.REPLACE:
            supersede(self.repo, task.id, self.stop_run)
        self.repo.create_run(task.id, Trigger.SCHEDULE, scheduled_at_ms=slot_ms)


def supersede(repo: LocalRunRepository, task_id: str, stop_run: Callable[[str], object]) -> None:
    """Policy ``replace``: cancel the task's queued runs and ask its active ones to stop
    (cancel intent first, then TERM via ``stop_run``); the new run starts once their
    groups are gone (DESIGN.md §3.7)."""
    for run in repo.queued_runs(task_id):
        repo.request_cancel(run.id, reason="replaced")
    for run in repo.active_runs(task_id):
        repo.request_cancel(run.id, reason="replaced")
        stop_run(run.id)
