"""Creating a run: the one insert of a queued runtime run (docs/architecture.md §2;
docs/protocols.md §4.2).

Used by the scheduler for a due slot and by the API for "run now", inside the caller's
transaction. Every creation holds the task row's lock when it takes a number, so run numbers
of one task are handed out one at a time with no gap (``tasks.run_counter``, rolled back
with a transaction that fails), and a slot that another replica has already served is seen
and answered with None before a number is taken. The unique index ``runs_task_slot_idx``
(task, scheduled_for) with ``ON CONFLICT DO NOTHING`` stays the last word: at most one run
per slot whatever the callers do. Run now of an ``allow`` task takes the lock only in its
last statement (``scheduling/firing.py`` ``run_now``), so concurrent requests for one task
wait for each other's commit only, not for each other's whole transaction.

Run now's ``Idempotency-Key`` (docs/protocols.md §4.5): ``claim_request_key`` records the
key with the run about to be made, ``requested_run`` reads the run an earlier request with
the key made, and ``prune_request_keys`` deletes keys past their 24 hours.
"""

from __future__ import annotations

import re
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
    from sqlalchemy import Connection, RowMapping

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
    return str(locked_task(conn, task_id)["project_id"])


def locked_task(conn: Connection, task_id: str) -> RowMapping:
    """``lock_task``, answering the locked row's ``id``, ``project_id``, ``deleted_at`` and
    ``concurrency_policy``. Raises as ``lock_task``."""
    row = run_named(conn, queries()["lock_task"],
                    {"task_id": validate_uuid7(task_id, "task_id")}).mappings().first()
    if row is None:
        raise TaskNotFoundError(f"task {task_id} does not exist")
    if row["deleted_at"] is not None:
        raise TaskDeletedError(f"task {task_id} was removed")
    return row


def create_run(conn: Connection, *, task_id: str, trigger: Trigger,
               scheduled_for: datetime | None = None, run_id: str | None = None,
               task_locked: bool = False) -> CreatedRun | None:
    """Insert a queued runtime run of ``task_id`` in the caller's transaction (``conn``: a
    SQLAlchemy Connection with a transaction open; this opens and commits none).

    ``trigger`` 'manual' needs ``scheduled_for`` None; 'schedule' and 'boot' need the slot
    (an aware datetime). The run gets the task's project, the next per-task number through
    ``tasks.run_counter``, ``not_before = now()`` and one ``events`` row (kind 'created',
    to_status 'queued'). Returns None, taking no number, when the slot already has a run
    (another replica served it: docs/protocols.md §4.2, ``ON CONFLICT DO NOTHING``).

    ``run_id``: the new run's id (a UUIDv7 string; a fresh one when None), for a caller
    that recorded it first (run now's ``Idempotency-Key``). ``task_locked``: the caller
    already holds the task row's lock (``lock_task`` or the tick's due read) and checked it
    is live, so it is not taken again.

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
    if not task_locked:
        lock_task(conn, task_id)
    row = run_named(conn, queries()["insert_run"], {
        "task_id": task_id, "trigger": trigger, "scheduled_for": scheduled_for,
        "run_id": run_id or uuid7(), "event_id": uuid7(),
    }).mappings().first()
    return None if row is None else created_run(row)


def created_run(row: RowMapping) -> CreatedRun:
    """The ``CreatedRun`` of an ``insert_run`` (or ``insert_allowed_run``) answer row."""
    return CreatedRun(
        run_id=str(row["id"]), project_id=str(row["project_id"]), task_id=str(row["task_id"]),
        number=int(row["number"]), trigger=str(row["trigger"]),
        scheduled_for=row["scheduled_for"], not_before=row["not_before"],
        created_at=row["created_at"],
    )


REQUEST_KEY_PATTERN = re.compile(r"^[!-~]{1,255}$")  # the table's CHECK (migration 0015)


def claim_request_key(conn: Connection, *, task_id: str, key: str, run_id: str) -> bool:
    """Record run now's ``Idempotency-Key`` ``key`` for task ``task_id`` and the run
    ``run_id`` about to be made, in the caller's transaction (docs/protocols.md §4.5).

    True: the key is this request's (new, or its row was older than 24 hours and is taken
    over); the caller makes run ``run_id`` in the same transaction, so a rollback frees the
    key. False: a request with the key made a run within 24 hours (``requested_run`` reads
    it). A concurrent first use of the key waits for the other transaction's end. Raises
    ValidationError when ``key`` is not 1..255 visible ASCII characters.
    """
    if not REQUEST_KEY_PATTERN.match(key):
        raise ValidationError("Idempotency-Key", "must be 1 to 255 visible ASCII characters")
    return run_named(conn, queries()["claim_request_key"], {
        "task_id": task_id, "key": key, "run_id": run_id}).first() is not None


def requested_run(conn: Connection, *, task_id: str, key: str) -> tuple[str, int] | None:
    """``(run id, number)`` of the run a request with ``key`` made for ``task_id``; None
    when no key row names a run that still exists (history pruning removed it)."""
    row = run_named(conn, queries()["requested_run"],
                    {"task_id": task_id, "key": key}).first()
    return None if row is None else (str(row[0]), int(row[1]))


def prune_request_keys(conn: Connection, *, limit: int = 1000) -> int:
    """Delete at most ``limit`` (≥ 1) run-now keys older than 24 hours, oldest first,
    skipping rows another transaction holds, in the caller's transaction; rows deleted."""
    if limit < 1:
        raise ValidationError("limit", "must be at least 1")
    return int(run_named(conn, queries()["prune_request_keys"], {"limit": limit}).rowcount)
