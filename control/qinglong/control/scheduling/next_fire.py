"""A task's next fire time, set outside the scheduler's tick (docs/protocols.md §4.2).

The API calls these inside its own transaction when a task is created, edited, enabled,
disabled or removed: ``reschedule`` moves ``tasks.next_fire_at`` to the first slot after the
database's ``now()`` (or NULL) and bumps ``schedule_version``, so a tick that read the old
version loses its compare-and-set instead of overwriting the edit. ``on_enable`` first records
the slots missed while the task was disabled as one compact ``skipped_disabled`` ledger row.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.scheduling.errors import (
    ScheduleAdvanceLostError,
    TaskDeletedError,
    TaskNotFoundError,
)
from qinglong.control.scheduling.ledger import from_ms, record_skips, to_ms
from qinglong.control.scheduling.run_creation import queries
from qinglong.shared.cron import Schedule, parse_schedule
from qinglong.shared.ids import validate_uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection, RowMapping

ENABLE_GAP_SCAN_LIMIT = 100_000
"""Slots ``on_enable`` counts at most; a longer gap records its first this many slots."""


def advance(conn: Connection, task_id: str, schedule_version: int,
            next_fire_ms: int | None) -> None:
    """Compare-and-set ``next_fire_at`` (Unix ms or None) on ``schedule_version``, bumping it.

    Raises ScheduleAdvanceLostError when the version moved (nothing changed).
    """
    updated = run_named(conn, queries()["advance"], {
        "task_id": task_id, "schedule_version": schedule_version,
        "next_fire_at": None if next_fire_ms is None else from_ms(next_fire_ms),
    }).rowcount
    if updated != 1:
        raise ScheduleAdvanceLostError(f"task {task_id}: schedule_version moved")


def cron_schedule(text: str | None, timezone: str) -> Schedule | None:
    """The parsed cron schedule, or None for a manual-only task (NULL, ``@once``, ``@boot``:
    no slots in the cluster tick). Raises ValidationError for an invalid schedule or zone."""
    if text is None:
        return None
    schedule = parse_schedule(text, timezone)
    return schedule if schedule.kind == "cron" else None


def _locked(conn: Connection, task_id: str) -> RowMapping:
    row = run_named(conn, queries()["lock_schedule"],
                    {"task_id": validate_uuid7(task_id, "task_id")}).mappings().first()
    if row is None:
        raise TaskNotFoundError(f"task {task_id} does not exist")
    return row


def reschedule(conn: Connection, task_id: str) -> datetime | None:
    """Set ``next_fire_at`` to the task's first slot strictly after the database's now() and
    bump ``schedule_version``, in the caller's transaction (locks the task row). NULL, and
    None returned, for a disabled or removed task and one with no schedule, ``@once`` or
    ``@boot``. Returns the new next fire time (aware UTC datetime) or None.

    Call on create, edit, enable (after ``on_enable``), disable and removal. Raises
    TaskNotFoundError, ValidationError (a stored schedule or zone that does not parse).
    """
    row = _locked(conn, task_id)
    schedule = None
    if row["enabled"] and row["deleted_at"] is None:
        schedule = cron_schedule(row["schedule"], row["timezone"])
    nxt = None if schedule is None else schedule.next_slot_after(to_ms(row["db_now"]))
    advance(conn, task_id, int(row["schedule_version"]), nxt)
    return None if nxt is None else from_ms(nxt)


def on_enable(conn: Connection, task_id: str, *, disabled_since: datetime) -> int:
    """Record the slots missed while the task was disabled, then ``reschedule`` it; in the
    caller's transaction, after it set ``enabled``. Returns the slots recorded.

    ``disabled_since``: when the task was disabled (aware datetime; the API's task event).
    The missed slots run from the first slot not in the ledger, at or before
    ``disabled_since`` (a slot that came due just before the disable and was never ticked
    counts) up to now(); they become one ``skipped_disabled`` row (merged with an adjacent
    one). At most ``ENABLE_GAP_SCAN_LIMIT`` slots are counted (docs/protocols.md §4.2 ledger).

    Raises TaskNotFoundError, TaskDeletedError, ValidationError (bad schedule or zone).
    """
    row = _locked(conn, task_id)
    if row["deleted_at"] is not None:
        raise TaskDeletedError(f"task {task_id} was removed")
    schedule = cron_schedule(row["schedule"], row["timezone"])
    recorded = 0
    if schedule is not None:
        s0 = schedule.latest_slot_at_or_before(to_ms(disabled_since))
        after = s0 - 1 if s0 is not None else to_ms(disabled_since)
        latest = run_named(conn, queries()["latest_occurrence"],
                           {"task_id": task_id}).mappings().first()
        if latest is not None:
            after = max(after, to_ms(latest["last_slot"]))
        first = last = None
        for slot in schedule.slots_between(after, to_ms(row["db_now"])):
            if recorded == ENABLE_GAP_SCAN_LIMIT:
                break
            first = slot if first is None else first
            last, recorded = slot, recorded + 1
        if first is not None and last is not None:
            record_skips(conn, schedule, task_id, "skipped_disabled", from_ms(first),
                         from_ms(last), recorded)
    reschedule(conn, task_id)
    return recorded
