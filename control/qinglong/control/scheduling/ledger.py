"""The occurrence ledger (docs/protocols.md §4.2): every slot of an enabled task has one outcome.

Outcomes: ``run_created`` (one slot, names its run), ``skipped_active`` (policy ``forbid``
with a run active), ``backlog_full`` (policy ``allow`` at its queued bound),
``skipped_downtime`` (older than the catch-up grace, or overtaken by a later slot) and
``skipped_disabled`` (the task was disabled). Skips are compact: a range of consecutive slots
with one outcome is one row (first_slot, last_slot, slot_count). Writers hold the task row
lock (the scheduler's due read, ``lock_task``), so a task's ledger has one writer at a time.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from qinglong.control.db.engine import run_named
from qinglong.control.scheduling.run_creation import queries
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from qinglong.shared.cron import Schedule

Outcome = Literal["run_created", "skipped_active", "skipped_downtime", "backlog_full",
                  "skipped_disabled"]
SKIP_OUTCOMES: frozenset[str] = frozenset(
    {"skipped_active", "skipped_downtime", "backlog_full", "skipped_disabled"})
PRUNE_LIMIT_MAX = 10_000


def to_ms(t: datetime) -> int:
    """Unix milliseconds of an aware datetime."""
    return int(t.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    """An aware UTC datetime for Unix milliseconds ``ms``."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def record_run_created(conn: Connection, task_id: str, slot: datetime, run_id: str) -> None:
    """One ``run_created`` row for ``slot`` naming ``run_id`` (unique per run: a replay cannot
    count the slot twice). Caller holds the task row lock, in its transaction."""
    run_named(conn, queries()["insert_occurrence"], {
        "id": uuid7(), "task_id": task_id, "outcome": "run_created", "first_slot": slot,
        "last_slot": slot, "slot_count": 1, "run_id": run_id})


def record_skips(conn: Connection, schedule: Schedule, task_id: str, outcome: Outcome,
                 first_slot: datetime, last_slot: datetime, slot_count: int) -> bool:
    """Record ``slot_count`` consecutive slots ``first_slot..last_slot`` (aware datetimes,
    slots of ``schedule``) with the skip ``outcome``. They extend the task's newest row when
    it has the same outcome and ends at the slot just before ``first_slot`` (adjacent);
    else a new row. Returns True when merged. Caller holds the task row lock.

    Raises ValidationError for a run outcome, a count below 1 or a reversed range.
    """
    if outcome not in SKIP_OUTCOMES:
        raise ValidationError("outcome", "only skip outcomes are recorded as ranges")
    if slot_count < 1 or last_slot < first_slot:
        raise ValidationError("slot_count", "a skip range needs >= 1 slot, first <= last")
    latest = run_named(conn, queries()["latest_occurrence"],
                       {"task_id": task_id}).mappings().first()
    if (latest is not None and latest["outcome"] == outcome
            and schedule.next_slot_after(to_ms(latest["last_slot"])) == to_ms(first_slot)):
        run_named(conn, queries()["extend_occurrence"], {
            "id": latest["id"], "last_slot": last_slot, "slot_count": slot_count})
        return True
    run_named(conn, queries()["insert_occurrence"], {
        "id": uuid7(), "task_id": task_id, "outcome": outcome, "first_slot": first_slot,
        "last_slot": last_slot, "slot_count": slot_count, "run_id": None})
    return False


def prune_occurrences(conn: Connection, *, older_than: datetime, limit: int) -> int:
    """Delete at most ``limit`` (1..10,000) ledger rows whose last slot is before
    ``older_than`` (aware datetime), oldest first, skipping rows another pruner holds; in the
    caller's transaction (whose planner settings it pins, ``prune_occurrences_plan``: its
    work does not grow with the ledger, ``integration/control/test_control_claim_work.py``).
    Returns rows deleted; 0 means nothing is left to prune. Run it before run history is
    pruned (a ``run_created`` row references its run).

    Raises ValidationError for a limit outside 1..10,000 or a naive datetime.
    """
    if not 1 <= limit <= PRUNE_LIMIT_MAX:
        raise ValidationError("limit", f"{limit} outside 1..{PRUNE_LIMIT_MAX}")
    if older_than.utcoffset() is None:
        raise ValidationError("older_than", "must be an aware datetime")
    run_named(conn, queries()["prune_occurrences_plan"])  # bounded without statistics
    return run_named(conn, queries()["prune_occurrences"],
                     {"older_than": older_than, "limit": limit}).rowcount
