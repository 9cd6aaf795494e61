"""Stored next fire times: the queries of an indexed scheduler tick (issue 10 items 1 and 3,
docs/protocols.md §3.7).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``. Schema: ``migrations/sqlite/0004-next-fire.sql``. A tick reads only what is due
(``next_fire_at_ms <= now``, a bounded page of the partial index ``tasks_next_fire``) and the
batches still to compute (``tasks_next_fire_pending``); the serve loop sleeps until one
indexed ``MIN``. No query here scans every task except :meth:`rebase_future_cursors`, which
runs only when the wall clock stepped back. Every write is a compare-and-set on the task's
``version`` (bumped by enable, disable and remove) and on the value the caller read, so a
change made meanwhile is never overwritten.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qinglong.local.storage.database import Database
from qinglong.local.storage.rows import EVENT_COLUMNS, TASK_COLUMNS, task_from_row
from qinglong.shared.backoff import RETRY_CAP_S
from qinglong.shared.domain import Task
from qinglong.shared.ids import uuid7

MAX_SCHEDULE_PAGE = 1000

_LIVE = "enabled = 1 AND deleted_at_ms IS NULL"  # literal terms: the partial indexes match them


@dataclass(frozen=True, slots=True)
class ScheduleEntry:
    """A task with its stored next fire time (Unix ms, None = no slot or not computed),
    ``pending``: None when up to date, else why it must be computed (``new``,
    ``clock_step``), and ``replay_until_ms``: slots up to it are re-evaluated after a
    backward clock step (None = none; migration 0004)."""

    task: Task
    next_fire_at_ms: int | None
    pending: str | None
    replay_until_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ComputedSchedule:
    """The result of computing one pending entry: the cursor and next fire time to store
    (Unix ms; ``next_fire_at_ms`` None = no slot) and an optional task event
    (``event_kind``, ``event_detail``) written in the same transaction."""

    entry: ScheduleEntry
    cursor_ms: int | None
    next_fire_at_ms: int | None
    event_kind: str | None = None
    event_detail: dict[str, object] | None = None


def _check_limit(limit: int) -> None:
    if type(limit) is not int or not 1 <= limit <= MAX_SCHEDULE_PAGE:
        raise ValueError(f"limit must be 1-{MAX_SCHEDULE_PAGE}")


_EXTRA = ", next_fire_at_ms, next_fire_pending, schedule_replay_until_ms"


def _opt(value: object) -> int | None:
    return None if value is None else int(str(value))


def _entry(row: Sequence[object]) -> ScheduleEntry:
    n = len(row)
    return ScheduleEntry(
        task_from_row(row[: n - 3]),
        _opt(row[n - 3]),
        None if row[n - 2] is None else str(row[n - 2]),
        _opt(row[n - 1]),
    )


def insert_task_event(
    conn: sqlite3.Connection, at_ms: int, kind: str, task_id: str | None, detail: dict[str, object]
) -> None:
    """Append a task-level event (``task_id`` None: a runtime-wide one) inside ``conn``'s
    transaction."""
    conn.execute(
        f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, NULL, NULL, NULL, NULL, ?)",  # noqa: S608
        (uuid7(), at_ms, kind, task_id, json.dumps(detail, sort_keys=True)),
    )


class ScheduleQueries:
    """Next fire time queries (mixin; needs ``db`` and ``clock`` of the repository).

    All methods raise StorageError/StorageClosedError/StorageBusyError from the Database;
    page methods raise ValueError for a limit outside 1-1000.
    """

    db: Database
    clock: Callable[[], int]

    def due_schedules(self, now_ms: int, limit: int) -> list[ScheduleEntry]:
        """Up-to-date enabled live tasks with ``next_fire_at_ms <= now_ms`` (Unix ms), in
        (next_fire_at_ms, id) order, at most ``limit`` (one range of ``tasks_next_fire``)."""
        _check_limit(limit)
        return self.db.read(lambda conn: [_entry(row) for row in conn.execute(
            f"SELECT {TASK_COLUMNS}{_EXTRA} FROM tasks"  # noqa: S608
            f" WHERE {_LIVE} AND next_fire_pending IS NULL AND next_fire_at_ms IS NOT NULL"
            " AND next_fire_at_ms <= ? ORDER BY next_fire_at_ms, id LIMIT ?",
            (now_ms, limit),
        )])

    def pending_schedules(self, limit: int) -> list[ScheduleEntry]:
        """Enabled live tasks whose next fire time must be computed, by id, at most
        ``limit`` (``tasks_next_fire_pending``)."""
        _check_limit(limit)
        return self.db.read(lambda conn: [_entry(row) for row in conn.execute(
            f"SELECT {TASK_COLUMNS}{_EXTRA} FROM tasks"  # noqa: S608
            f" WHERE {_LIVE} AND next_fire_pending IS NOT NULL ORDER BY id LIMIT ?",
            (limit,),
        )])

    def earliest_next_fire(self) -> int | None:
        """The smallest stored next fire time (Unix ms) of an up-to-date enabled live task,
        or None: one indexed MIN, whatever the number of tasks."""
        row = self.db.read(lambda conn: conn.execute(
            f"SELECT MIN(next_fire_at_ms) FROM tasks WHERE {_LIVE}"  # noqa: S608
            " AND next_fire_pending IS NULL AND next_fire_at_ms IS NOT NULL"
        ).fetchone())
        return None if row is None or row[0] is None else int(row[0])

    def next_fire_of(self, task_id: str) -> tuple[int | None, str | None]:
        """``(next_fire_at_ms, next_fire_pending)`` of one task (for views and tests).
        Raises KeyError for an unknown id."""
        row = self.db.read(lambda conn: conn.execute(
            "SELECT next_fire_at_ms, next_fire_pending FROM tasks WHERE id = ?", (task_id,)
        ).fetchone())
        if row is None:
            raise KeyError(task_id)
        return (None if row[0] is None else int(row[0]), None if row[1] is None else str(row[1]))

    def advance_schedule(
        self,
        entry: ScheduleEntry,
        cursor_ms: int,
        next_fire_at_ms: int | None,
        *,
        skipped: int = 0,
        capped: bool = False,
        reason: str = "misfire",
        missed: tuple[int | None, int | None] = (None, None),
        fired_ms: int | None = None,
    ) -> bool:
        """After a due entry was handled: store its new cursor and next fire time (Unix ms)
        and, when ``skipped`` > 0, one ``slots_skipped`` event, in one transaction; the
        replay mark is dropped once the cursor reaches it. The event names the slots missed:
        ``first_missed_ms`` and ``last_missed_ms`` (``missed``, Unix ms) and, apart,
        ``fired_slot_ms``, the slot that ran instead (None: none did).

        Compare-and-set on the version and next fire time read in ``entry``: False (nothing
        written) when the task changed meanwhile (disabled, removed, re-enabled, or another
        scheduler advanced it)."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE tasks SET schedule_cursor_ms = ?, next_fire_at_ms = ?,"
                " schedule_replay_until_ms = CASE WHEN schedule_replay_until_ms > ?"
                " THEN schedule_replay_until_ms END"
                " WHERE id = ? AND version = ? AND next_fire_pending IS NULL"
                " AND next_fire_at_ms IS ?",
                (cursor_ms, next_fire_at_ms, cursor_ms, entry.task.id, entry.task.version,
                 entry.next_fire_at_ms),
            )
            if cur.rowcount != 1:
                return False
            if skipped:
                insert_task_event(conn, at, "slots_skipped", entry.task.id, {
                    "skipped": skipped, "at_least": capped, "reason": reason,
                    "first_missed_ms": missed[0], "last_missed_ms": missed[1],
                    "fired_slot_ms": fired_ms,
                    # the slots considered: (after_ms, until_ms], the fired one excepted
                    "after_ms": entry.task.schedule_cursor_ms, "until_ms": cursor_ms})
            return True

        return self.db.write(op)

    def store_computed_schedules(self, results: Sequence[ComputedSchedule]) -> int:
        """Store a batch of computed next fire times in one transaction (one commit for the
        whole batch: an import of thousands of tasks costs a few commits, not thousands).

        Each row is a compare-and-set on the version and ``pending`` read; a row that
        changed meanwhile is left pending for the next batch. Returns the rows stored."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> int:
            stored = 0
            for r in results:
                cur = conn.execute(
                    "UPDATE tasks SET schedule_cursor_ms = ?, next_fire_at_ms = ?,"
                    " next_fire_pending = NULL WHERE id = ? AND version = ?"
                    " AND next_fire_pending IS ?",
                    (r.cursor_ms, r.next_fire_at_ms, r.entry.task.id, r.entry.task.version,
                     r.entry.pending),
                )
                if cur.rowcount != 1:
                    continue
                stored += 1
                if r.event_kind is not None:
                    insert_task_event(conn, at, r.event_kind, r.entry.task.id,
                                      r.event_detail or {})
            return stored

        return self.db.write(op) if results else 0

    def rebase_future_cursors(
        self, now_ms: int, detail: dict[str, object], *, record_when_none: bool = True
    ) -> int:
        """The wall clock stepped back (issue 10 item 3): clamp every enabled live task's
        cursor that lies after ``now_ms`` (Unix ms) to ``now_ms``, remember the old cursor
        as its replay mark and mark its next fire time pending (``clock_step``), and record
        one runtime-wide ``clock_step`` event (``task_id`` NULL) with ``detail`` plus
        ``rebased`` (the count) and ``queued_moved`` (queued runs whose ``not_before`` was
        moved back with the clock, see the code), in one transaction; with
        ``record_when_none`` False the event is written only when something was rebased.
        Returns the number of tasks rebased.
        Scans the tasks table once (only at a step).

        Slots in (now, old cursor] may have fired already: they are re-evaluated as time
        passes; the unique (task, slot) index and :meth:`slot_was_handled` keep any of them
        from firing twice."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "UPDATE tasks SET schedule_cursor_ms = ?, next_fire_pending = 'clock_step',"
                " schedule_replay_until_ms = MAX(schedule_cursor_ms,"
                " COALESCE(schedule_replay_until_ms, schedule_cursor_ms))"
                " WHERE enabled = 1 AND deleted_at_ms IS NULL AND schedule_cursor_ms > ?",
                (now_ms, now_ms),
            )
            rebased = max(cur.rowcount, 0)
            # queued runs wait for a wall time: one queued just before the step would wait
            # the whole step (a forbid task's later slots coalescing into it meanwhile). A
            # measured step moves them back by the step (retry delays keep their real
            # length); a cursor found in the future at start (step unknown) clamps those
            # due beyond the longest retry delay to now
            step = detail.get("step_ms")
            if isinstance(step, int) and step < 0:
                # only runs queued on the old timeline (updated after now): a retry queued
                # on the new clock between the step and this tick keeps its delay
                moved = conn.execute(
                    "UPDATE runs SET not_before_ms = MAX(?, not_before_ms + ?)"
                    " WHERE status = 'queued' AND not_before_ms > ? AND updated_at_ms > ?",
                    (now_ms, step, now_ms, now_ms))
            else:
                moved = conn.execute(
                    "UPDATE runs SET not_before_ms = ? WHERE status = 'queued'"
                    " AND not_before_ms > ?", (now_ms, now_ms + int(RETRY_CAP_S * 1000)))
            queued = max(moved.rowcount, 0)
            if rebased or queued or record_when_none:
                insert_task_event(conn, at, "clock_step", None,
                                  {**detail, "rebased": rebased, "queued_moved": queued})
            return rebased

        return self.db.write(op)

    def record_runtime_event(self, kind: str, detail: dict[str, object]) -> None:
        """Append a runtime-wide event (no task, no run), e.g. a forward ``clock_step``."""
        at = self.clock()
        self.db.write(lambda conn: insert_task_event(conn, at, kind, None, detail))

    def runtime_events(self, kind: str, limit: int = 20) -> list[tuple[int, dict[str, object]]]:
        """Runtime-wide events (no task, no run) of ``kind``, newest first:
        ``(at_ms, detail)``."""
        rows = self.db.read(lambda conn: conn.execute(
            "SELECT at_ms, detail FROM events WHERE task_id IS NULL AND run_id IS NULL"
            " AND kind = ? ORDER BY id DESC LIMIT ?", (kind, limit),
        ).fetchall())
        return [(int(at), dict(json.loads(str(d))) if d else {}) for at, d in rows]

    def slot_was_handled(self, task_id: str, slot_ms: int) -> bool:
        """Whether (task, slot ``slot_ms``, Unix ms) already has a run (index
        ``runs_task_slot``) or a recorded outcome: a ``slot_skipped``/``slot_coalesced``
        event whose range [``slot_ms``, ``last_slot_ms``] covers it (merged outcomes, see
        ``dispatch_queries``), or a ``slots_skipped`` event (misfire, forward clock step)
        whose range (``after_ms``, ``until_ms``] covers it. The events are read through the
        partial index ``events_slot_outcomes`` (migration 0004); call it only for slots
        re-evaluated after a backward clock step. Raises StorageError and friends."""
        return self.db.read(lambda conn: conn.execute(
            "SELECT 1 FROM runs WHERE task_id = ? AND scheduled_at_ms = ?"
            " UNION ALL SELECT 1 FROM events WHERE task_id = ? AND run_id IS NULL"
            " AND kind IN ('slot_skipped', 'slot_coalesced', 'slots_skipped') AND ("
            "  (kind <> 'slots_skipped' AND ? BETWEEN json_extract(detail, '$.slot_ms')"
            "   AND coalesce(json_extract(detail, '$.last_slot_ms'),"
            "   json_extract(detail, '$.slot_ms')))"
            "  OR (kind = 'slots_skipped' AND ? > json_extract(detail, '$.after_ms')"
            "   AND ? <= json_extract(detail, '$.until_ms'))) LIMIT 1",
            (task_id, slot_ms, task_id, slot_ms, slot_ms, slot_ms),
        ).fetchone() is not None)

    def boot_task_candidates(self) -> list[Task]:
        """Live tasks whose schedule text mentions ``@boot`` (any case), by name: the
        candidates a ``serve`` start checks, without loading every task."""
        return self.db.read(lambda conn: [task_from_row(row) for row in conn.execute(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE deleted_at_ms IS NULL"  # noqa: S608
            " AND schedule LIKE '%@boot%' ORDER BY name"
        )])
