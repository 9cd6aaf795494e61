"""Events of the local database: the one insert every status change writes beside its row
("双 Event", docs/architecture.md §2) and the reads of a run's or a task's events.

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``; ``insert_event`` runs inside the caller's transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from qinglong.local.storage.database import Database
from qinglong.local.storage.rows import EVENT_COLUMNS, event_from_row
from qinglong.shared.domain import Event
from qinglong.shared.ids import uuid7


def insert_event(
    conn: sqlite3.Connection,
    at: int,
    kind: str,
    *,
    task_id: str | None = None,
    run_id: str | None = None,
    attempt_id: str | None = None,
    from_status: str | None = None,
    to_status: str | None = None,
    detail: dict[str, object] | None = None,
) -> None:
    """Append one event at ``at`` (Unix ms) of ``kind`` inside the caller's transaction;
    ``detail`` is stored as sorted JSON. Raises sqlite3 errors to the caller's transaction."""
    conn.execute(
        f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
        (
            uuid7(),
            at,
            kind,
            task_id,
            run_id,
            attempt_id,
            from_status,
            to_status,
            None if detail is None else json.dumps(detail, sort_keys=True),
        ),
    )


class EventStore:
    """Event appends and reads (mixin; needs ``db`` and ``clock`` of the repository). All
    methods raise StorageError/StorageClosedError/StorageBusyError from the Database."""

    db: Database
    clock: Callable[[], int]

    def task_event(self, task_id: str, kind: str, detail: dict[str, object]) -> None:
        """Append a task-level event (for example a slot skipped by policy ``forbid``)."""
        at = self.clock()
        self.db.write(lambda conn: insert_event(conn, at, kind, task_id=task_id, detail=detail))

    def run_event(self, task_id: str, run_id: str, kind: str, detail: dict[str, object]) -> None:
        """Append an event about an ended run (for example a notification's outcome)."""
        at = self.clock()
        self.db.write(lambda conn: insert_event(conn, at, kind, task_id=task_id, run_id=run_id,
                                          detail=detail))

    def list_events(self, run_id: str) -> list[Event]:
        """Events of one run, oldest first."""
        return self.db.read(
            lambda c: [
                event_from_row(row)
                for row in c.execute(
                    f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? ORDER BY id",  # noqa: S608
                    (run_id,),
                )
            ]
        )

    def task_events(self, task_id: str, limit: int = 50) -> list[Event]:
        """Task-level events (run_id NULL), newest first."""
        return self.db.read(
            lambda c: [
                event_from_row(row)
                for row in c.execute(
                    f"SELECT {EVENT_COLUMNS} FROM events WHERE task_id = ? AND run_id IS NULL"  # noqa: S608
                    " ORDER BY id DESC LIMIT ?",
                    (task_id, limit),
                )
            ]
        )
