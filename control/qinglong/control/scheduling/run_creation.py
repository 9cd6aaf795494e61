"""Creating a run: the one insert of a queued runtime run (docs/architecture.md §2;
docs/protocols.md §4.2).

Used by the scheduler for a due slot and by the API for "run now", inside the caller's
transaction. Every creation first locks the task row, so run numbers of one task are handed
out one at a time with no gap (``tasks.run_counter``), and a slot that another replica has
already served is seen and answered with None before a number is taken. The unique index
``runs_task_slot_idx`` (task, scheduled_for) with ``ON CONFLICT DO NOTHING`` stays the last
word: at most one run per slot whatever the callers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, LiteralString

from qinglong.control.db.engine import run_named
from qinglong.control.db.queries import load_queries
from qinglong.control.scheduling.errors import TaskDeletedError, TaskNotFoundError
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7, validate_uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection

Trigger = Literal["schedule", "manual", "boot"]
TRIGGERS: frozenset[str] = frozenset({"schedule", "manual", "boot"})
_QUERIES_DIR = str(Path(__file__).parent)


def queries() -> dict[str, LiteralString]:
    """The named statements of ``scheduling/queries.sql``, loaded once per process."""
    return load_queries(_QUERIES_DIR, "queries.sql")


@dataclass(frozen=True)
class CreatedRun:
    """A run just inserted: status ``queued``, owner ``runtime``.

    ``number``: the task's run number (1, 2, 3, ... without gaps). ``scheduled_for``: the
    slot (aware UTC datetime) or None for a manual run. ``not_before`` and ``created_at``:
    the database's ``now()`` of the creating transaction.
    """

    run_id: str
    project_id: str
    task_id: str
    number: int
    trigger: str
    scheduled_for: datetime | None
    not_before: datetime
    created_at: datetime


def lock_task(conn: Connection, task_id: str) -> str:
    """Lock the task row ``FOR UPDATE`` in the caller's transaction; returns its project id.

    Raises TaskNotFoundError for an unknown id, TaskDeletedError for a removed task,
    InvalidIdentifierError for a malformed id.
    """
    row = run_named(conn, queries()["lock_task"],
                    {"task_id": validate_uuid7(task_id, "task_id")}).mappings().first()
    if row is None:
        raise TaskNotFoundError(f"task {task_id} does not exist")
    if row["deleted_at"] is not None:
        raise TaskDeletedError(f"task {task_id} was removed")
    return str(row["project_id"])


def create_run(conn: Connection, *, task_id: str, trigger: Trigger,
               scheduled_for: datetime | None = None) -> CreatedRun | None:
    """Insert a queued runtime run of ``task_id`` in the caller's transaction (``conn``: a
    SQLAlchemy Connection with a transaction open; this opens and commits none).

    ``trigger`` 'manual' needs ``scheduled_for`` None; 'schedule' and 'boot' need the slot
    (an aware datetime). The run gets the task's project, the next per-task number through
    ``tasks.run_counter``, ``not_before = now()`` and one ``events`` row (kind 'created',
    to_status 'queued'). Returns None, taking no number, when the slot already has a run
    (another replica served it: docs/protocols.md §4.2, ``ON CONFLICT DO NOTHING``).

    Locks the task row until the caller's transaction ends. Raises TaskNotFoundError,
    TaskDeletedError (a removed task gets no run), ValidationError for a trigger/slot
    mismatch or a naive datetime.
    """
    if trigger not in TRIGGERS:
        raise ValidationError("trigger", "trigger must be schedule, manual or boot")
    if (trigger == "manual") != (scheduled_for is None):
        raise ValidationError("scheduled_for",
                              "a manual run has no slot; a scheduled or boot run needs one")
    if scheduled_for is not None and scheduled_for.utcoffset() is None:
        raise ValidationError("scheduled_for", "the slot must be an aware datetime")
    lock_task(conn, task_id)
    row = run_named(conn, queries()["insert_run"], {
        "task_id": task_id, "trigger": trigger, "scheduled_for": scheduled_for,
        "run_id": uuid7(), "event_id": uuid7(),
    }).mappings().first()
    if row is None:
        return None
    return CreatedRun(
        run_id=str(row["id"]), project_id=str(row["project_id"]), task_id=str(row["task_id"]),
        number=int(row["number"]), trigger=str(row["trigger"]),
        scheduled_for=row["scheduled_for"], not_before=row["not_before"],
        created_at=row["created_at"],
    )
