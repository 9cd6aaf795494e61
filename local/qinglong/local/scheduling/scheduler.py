"""The scheduler: turns due cron slots into queued runs (docs/protocols.md §3.7).

A run is created at most once per (task, slot): the unique index on
``runs (task_id, scheduled_at_ms)`` decides, so a repeated tick can never fire twice.
The concurrency policy at a due slot (forbid, allow with its bounded backlog, replace) is
``slot_policy.admit_slot``.

A tick costs what is due, not the number of tasks (issue 10 item 1, migration 0004): each
enabled cron task stores its next fire time (the first slot after its cursor) in an indexed
column. A tick

1. checks the wall clock against the boot-time clock (``clock.py``, issue 10 item 3): a step
   back rebases every cursor left in the future (their next fire times become pending, one
   runtime-wide ``clock_step`` event); a step forward is downtime (the misfire grace
   applies; skipped slots are recorded with reason ``clock_step``);
2. handles one page of tasks whose next fire time is due: ``due()`` from the cursor, fire
   through :meth:`Scheduler._fire` unless the slot already has a run, then store the new
   cursor and next fire time (compare-and-set);
3. computes one bounded batch of pending next fire times (tasks created, imported, enabled,
   or rebased by a clock step) in one transaction;
4. returns when to wake: now if a page was full, else the indexed ``MIN`` of the stored
   next fire times, at most ``IDLE_WAKE_MS`` ahead (so a clock step is noticed within 5 s).

``@boot`` and ``@once`` tasks, invalid schedules and crons without a future slot store no
next fire time. Schedules are parsed through a small LRU keyed by (expression, zone), never
kept per task.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from qinglong.local.scheduling.clock import STEP_TOLERANCE_MS, WallClockStepDetector, boottime_ms
from qinglong.local.scheduling.slot_policy import admit_slot
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.local.storage.schedule_queries import ComputedSchedule, ScheduleEntry
from qinglong.shared.cron import Schedule, parse_schedule
from qinglong.shared.domain import Task, Trigger
from qinglong.shared.errors import QinglongError

log = logging.getLogger(__name__)

IDLE_WAKE_MS = 5_000
"""The longest sleep of the serve loop (ms), so that a wall-clock step is noticed soon."""
DUE_PAGE = 256
"""Due tasks handled per tick; a full page makes the next tick start at once."""
PENDING_PAGE = 256
"""Next fire times computed per tick (one transaction); a full batch continues at once."""
SCHEDULE_CACHE = 128
"""Parsed schedules kept, keyed by (expression, time zone): many tasks share one."""


class Scheduler:
    """Creates runs for due slots.

    ``stop_run(run_id)`` is called for the active runs of a ``replace`` task at a due slot.
    ``monotonic_ms`` (default ``CLOCK_BOOTTIME``) and ``step_tolerance_ms`` configure the
    wall-clock step detector (injectable for tests).
    """

    def __init__(
        self,
        repo: LocalRunRepository,
        stop_run: Callable[[str], None],
        *,
        monotonic_ms: Callable[[], int] = boottime_ms,
        step_tolerance_ms: int = STEP_TOLERANCE_MS,
    ) -> None:
        self.repo = repo
        self.stop_run = stop_run
        self.clock_steps = WallClockStepDetector(step_tolerance_ms, monotonic_ms)
        self._cache: OrderedDict[tuple[str, str], Schedule | None] = OrderedDict()
        self._started = False
        self._unapplied_back_ms = 0  # a measured backward step not yet rebased (ms, <= 0)

    def _schedule(self, task: Task) -> Schedule | None:
        key = (task.schedule, task.timezone)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        try:
            schedule: Schedule | None = parse_schedule(task.schedule, task.timezone)
        except QinglongError:
            log.warning("task %s has an invalid schedule; it never fires", task.id)
            schedule = None
        self._cache[key] = schedule
        if len(self._cache) > SCHEDULE_CACHE:
            self._cache.popitem(last=False)
        return schedule

    def boot(self, boot_ms: int) -> int:
        """Queue one run of every enabled ``@boot`` task for this serve start, under the
        task's concurrency policy (:func:`~qinglong.local.scheduling.slot_policy.admit_slot`)."""
        created = 0
        for task in self.repo.boot_task_candidates():  # not every task: issue 10 item 1
            schedule = self._schedule(task)
            if not task.enabled or schedule is None or schedule.kind != "boot":
                continue
            if admit_slot(self.repo, task, boot_ms, Trigger.BOOT, self.stop_run).run_created:
                created += 1
        return created

    def tick(self, now_ms: int) -> int:
        """Handle a clock step, fire due slots and compute a batch of pending next fire
        times at wall time ``now_ms`` (Unix ms); returns the Unix ms to wake at (``now_ms``
        when more work is waiting, else the earliest stored next fire time, capped at
        ``now_ms + IDLE_WAKE_MS``). Raises what the repository raises (StorageError...)."""
        try:
            reason = self._clock_step(now_ms)
        except BaseException:
            self._started = False  # the next tick looks for cursors left in the future again
            raise
        due = self.repo.due_schedules(now_ms, DUE_PAGE)
        for entry in due:
            self._handle_due(entry, now_ms, reason)
        pending = self.repo.pending_schedules(PENDING_PAGE)
        self.repo.store_computed_schedules([self._compute(e, now_ms) for e in pending])
        if len(due) == DUE_PAGE or len(pending) == PENDING_PAGE:
            return now_ms
        wake = now_ms + IDLE_WAKE_MS
        earliest = self.repo.earliest_next_fire()
        return wake if earliest is None else min(wake, earliest)

    def _clock_step(self, now_ms: int) -> str:
        """Issue 10 item 3: rebase after a backward step, record a forward one. Returns the
        reason given to slots skipped in this tick (``clock_step`` or ``misfire``)."""
        step = self.clock_steps.observe(now_ms)
        if step < 0:
            self._unapplied_back_ms += step  # kept until a rebase commits it
        if not self._started:
            # Cursors after now at the first tick (or after a failed tick): the clock went
            # back while nothing watched, or a measured step's rebase failed.
            measured = self._unapplied_back_ms or None
            self.repo.rebase_future_cursors(
                now_ms, {"direction": "backward", "step_ms": measured,
                         "detected": "retried" if measured else "cursor_in_future"},
                record_when_none=measured is not None,
            )
            self._unapplied_back_ms = 0
            self._started = True
            return "misfire"
        if step == 0:
            return "misfire"
        detail: dict[str, object] = {
            "direction": "forward" if step > 0 else "backward", "step_ms": step,
            "tolerance_ms": self.clock_steps.tolerance_ms,
        }
        log.warning("the wall clock stepped %s by %d ms", detail["direction"], abs(step))
        if step < 0:
            detail["step_ms"] = self._unapplied_back_ms
            self.repo.rebase_future_cursors(now_ms, detail)
            self._unapplied_back_ms = 0
            return "misfire"
        self.repo.record_runtime_event("clock_step", detail)
        return "clock_step"

    def _handle_due(self, entry: ScheduleEntry, now_ms: int, reason: str) -> None:
        task = entry.task
        schedule = self._schedule(task)
        cursor = now_ms if task.schedule_cursor_ms is None else task.schedule_cursor_ms
        if schedule is None or schedule.kind != "cron":
            self.repo.advance_schedule(entry, cursor, None)
            return
        due = schedule.due(cursor, now_ms, task.misfire_grace_s * 1000)
        slot = due.fire_slot_ms
        # Issue 10 item 3: a slot re-evaluated after a backward clock step that already has
        # a run or a recorded skip is passed over: the unique index would refuse a second
        # run, but ``replace`` would still cancel the active one and ``forbid`` would
        # record the skip twice.
        replayed = entry.replay_until_ms is not None and slot is not None \
            and slot <= entry.replay_until_ms
        if slot is not None and not (replayed and self.repo.slot_was_handled(task.id, slot)):
            self._fire(task, slot)
        missed: tuple[int | None, int | None] = (None, None)
        if due.skipped:  # the slots missed, not the one that ran (the event says which)
            last_before = slot - 1 if slot is not None else due.new_cursor_ms
            missed = (schedule.next_slot_after(cursor),
                      schedule.latest_slot_at_or_before(last_before))
        self.repo.advance_schedule(
            entry, due.new_cursor_ms, schedule.next_slot_after(max(due.new_cursor_ms, now_ms)),
            skipped=due.skipped, capped=due.skipped_capped, reason=reason,
            missed=missed, fired_ms=slot,
        )

    def _compute(self, entry: ScheduleEntry, now_ms: int) -> ComputedSchedule:
        """The cursor (now for a task never seen, so nothing from its past fires) and the
        first slot after it; a rebased task whose next fire time moved gets an event."""
        task = entry.task
        schedule = self._schedule(task)
        if schedule is None or schedule.kind != "cron":
            return ComputedSchedule(entry, task.schedule_cursor_ms, None)
        cursor = now_ms if task.schedule_cursor_ms is None else task.schedule_cursor_ms
        next_fire = schedule.next_slot_after(cursor)
        if entry.pending == "clock_step" and next_fire != entry.next_fire_at_ms:
            return ComputedSchedule(entry, cursor, next_fire, "clock_step", {
                "direction": "backward", "reason": "re-evaluated after the wall clock stepped back",
                "previous_next_fire_ms": entry.next_fire_at_ms, "next_fire_ms": next_fire,
            })
        return ComputedSchedule(entry, cursor, next_fire)

    def _fire(self, task: Task, slot_ms: int) -> None:
        admit_slot(self.repo, task, slot_ms, Trigger.SCHEDULE, self.stop_run)  # slot_policy.py
