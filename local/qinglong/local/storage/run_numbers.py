"""Run numbers and the lookups behind run references (issue 12 item 3).

Schema: ``migrations/sqlite/0005-run-numbers.sql``. Each run gets, at creation, the next
number of its task *name* (a task removed and added again continues its predecessors'
numbering), so ``backup#42`` names one run for as long as history keeps it. The lookups are
a mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``; parsing a reference and its error messages live in ``app/run_refs.py``.
"""

from __future__ import annotations

import sqlite3

from qinglong.local.storage.database import Database

MAX_SUFFIX_MATCHES = 2  # one match is an answer, two make the suffix ambiguous


def next_run_number(conn: sqlite3.Connection, task_id: str) -> int:
    """The number the next run of ``task_id`` gets: 1 + the highest number of any run of a
    task with the same name (removed ones included). Call inside the inserting transaction
    (the one serial connection makes max + 1 race-free). Each per-task maximum is one index
    probe of ``runs_task_number``."""
    row = conn.execute(
        "SELECT max((SELECT max(r.number) FROM runs r WHERE r.task_id = t.id))"
        " FROM tasks t WHERE t.name = (SELECT name FROM tasks WHERE id = ?)",
        (task_id,),
    ).fetchone()
    return 1 if row is None or row[0] is None else int(row[0]) + 1


class RunNumberQueries:
    """Find runs by task name and number, newest of a name, or run-id suffix (mixed into
    LocalRunRepository). Each returns run ids only; the caller loads the run."""

    db: Database

    def run_ids_by_number(self, task_name: str, number: int) -> list[str]:
        """Ids of runs numbered ``number`` among tasks named ``task_name`` (live or removed);
        normally zero or one."""
        return self.db.read(lambda c: [str(row[0]) for row in c.execute(
            "SELECT r.id FROM tasks t JOIN runs r ON r.task_id = t.id"
            " WHERE t.name = ? AND r.number = ? ORDER BY r.id",
            (task_name, number),
        )])

    def last_run_id(self, task_name: str) -> str | None:
        """The newest run (highest UUIDv7 id, so the last created) of any task named
        ``task_name``, or None when it has none."""
        row = self.db.read(lambda c: c.execute(
            "SELECT max((SELECT max(r.id) FROM runs r WHERE r.task_id = t.id))"
            " FROM tasks t WHERE t.name = ?",
            (task_name,),
        ).fetchone())
        return None if row is None or row[0] is None else str(row[0])

    def run_ids_by_suffix(self, suffix: str) -> list[str]:
        """Ids of runs whose id ends with ``suffix`` (lowercase, at least 6 characters),
        at most ``MAX_SUFFIX_MATCHES``, through the ``runs_id_suffix`` index. Raises
        ValueError for a shorter suffix."""
        if len(suffix) < 6:
            raise ValueError("a run-id suffix needs at least 6 characters")
        return self.db.read(lambda c: [str(row[0]) for row in c.execute(
            "SELECT id FROM runs WHERE substr(id, -6) = ? AND substr(id, -?) = ?"
            " ORDER BY id LIMIT ?",
            (suffix[-6:], len(suffix), suffix, MAX_SUFFIX_MATCHES),
        )])
