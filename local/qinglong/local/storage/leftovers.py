"""Leftover-process facts as events (issue 10 item 5, case C18).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``. No schema of its own: each stop of an attempt's leftovers is one row of the
``events`` table (``leftovers_stopped`` or ``leftovers_unresolved``, counts in the JSON
``detail``); what ``inspect``, ``runs`` and ``recovery status`` show is derived from them.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence

from qinglong.local.storage.database import Database
from qinglong.local.storage.rows import EVENT_COLUMNS, event_from_row
from qinglong.shared.domain import Event
from qinglong.shared.ids import uuid7

LEFTOVER_KINDS = ("leftovers_stopped", "leftovers_unresolved")
MAX_LEFTOVER_RUNS = 1000


class LeftoverQueries:
    """Record and read leftover events (mixed into LocalRunRepository)."""

    db: Database
    clock: Callable[[], int]

    def record_leftovers(
        self, run_id: str, attempt_id: str, kind: str, detail: dict[str, object]
    ) -> None:
        """Append one attempt event ``kind`` (one of LEFTOVER_KINDS) with ``detail``.

        Raises ValueError for another kind; StorageError from the store.
        """
        if kind not in LEFTOVER_KINDS:
            raise ValueError(f"not a leftover event kind: {kind}")
        at = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            task = conn.execute("SELECT task_id FROM runs WHERE id = ?", (run_id,)).fetchone()
            conn.execute(
                f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
                (uuid7(), at, kind, None if task is None else task[0], run_id, attempt_id,
                 None, None, json.dumps(detail, sort_keys=True)),
            )

        self.db.write(op)

    def leftover_events(self, run_ids: Sequence[str]) -> dict[str, list[Event]]:
        """Leftover events of each of ``run_ids`` (at most 1000), oldest first; runs without
        any are absent. One indexed read (``events_run``). Raises ValueError for more ids."""
        ids = list(run_ids)
        if len(ids) > MAX_LEFTOVER_RUNS:
            raise ValueError("at most 1000 runs")
        if not ids:
            return {}

        def op(conn: sqlite3.Connection) -> dict[str, list[Event]]:
            marks = ", ".join("?" * len(ids))
            rows = conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id IN ({marks})"  # noqa: S608
                " AND kind IN (?, ?) ORDER BY id",
                (*ids, *LEFTOVER_KINDS),
            ).fetchall()
            found: dict[str, list[Event]] = {}
            for row in rows:
                event = event_from_row(row)
                found.setdefault(str(event.run_id), []).append(event)
            return found

        return self.db.read(op)

    def unresolved_leftover_runs(self, limit: int = 100) -> list[tuple[str, str]]:
        """``(run id, attempt id)`` of attempts whose leftovers could not be stopped
        (``leftovers_unresolved``), newest first, at most ``limit`` (1-1000). Scans the
        events table (no index on ``kind``): for ``recovery status``, not for a hot path.
        Raises ValueError for a bad limit."""
        if type(limit) is not int or not 1 <= limit <= MAX_LEFTOVER_RUNS:
            raise ValueError("limit must be 1-1000")

        def op(conn: sqlite3.Connection) -> list[tuple[str, str]]:
            rows = conn.execute(
                "SELECT run_id, attempt_id FROM events WHERE kind = 'leftovers_unresolved'"
                " AND run_id IS NOT NULL AND attempt_id IS NOT NULL"
                " GROUP BY run_id, attempt_id ORDER BY max(id) DESC LIMIT ?",
                (limit,),
            ).fetchall()
            return [(str(r[0]), str(r[1])) for r in rows]

        return self.db.read(op)
