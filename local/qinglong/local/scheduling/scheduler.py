"""The scheduler: turns due cron slots into queued runs (DESIGN.md §3.7).

A run is created at most once per (task, slot): the unique index on
``runs (task_id, scheduled_at_ms)`` decides, so a repeated tick can never fire twice.
The concurrency policy at a due slot (forbid, allow with its bounded backlog, replace) is
``slot_policy.admit_slot``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from qinglong.local.scheduling.slot_policy import admit_slot
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.cron import Schedule, parse_schedule
from qinglong.shared.domain import Task, Trigger
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
        task's concurrency policy (:func:`~qinglong.local.scheduling.slot_policy.admit_slot`)."""
        created = 0
        for task in self.repo.list_tasks():
            schedule = self._schedule(task)
            if not task.enabled or schedule is None or schedule.kind != "boot":
                continue
            if admit_slot(self.repo, task, boot_ms, Trigger.BOOT, self.stop_run).run_created:
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
        admit_slot(self.repo, task, slot_ms, Trigger.SCHEDULE, self.stop_run)  # slot_policy.py
