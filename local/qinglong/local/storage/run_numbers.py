"""Run numbers and the lookups behind run references (issue 12 item 3).

Schema: ``migrations/sqlite/0005-run-numbers.sql``. Each run gets, at creation, the next
number of its task *name* (or of an equal name, ``shared/names.py``: a task removed and
added again continues its predecessors' numbering), so ``backup#42`` names one run for as
long as history keeps it. The lookups are
a mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``; parsing a reference and its error messages live in ``app/run_refs.py``.
"""

from __future__ import annotations

import sqlite3

from qinglong.local.storage.database import Database
from qinglong.shared.names import name_key


def named_args(name: str) -> tuple[str, str]:
    """The two arguments of ``(name = ? OR name_key = ?)``, the where-clause of ``tasks`` rows
    called ``name``: its exact spelling or its key (``shared/names.py``: ``backup1`` finds
    ``Backup1``, ``jd1`` finds ``ＪＤ１``). The spelling too, for rows keyed ``name/id`` by
    migration 0007."""
    return name, name_key(name)


MAX_SUFFIX_MATCHES = 2  # one match is an answer, two make the suffix ambiguous


def next_run_number(conn: sqlite3.Connection, task_id: str) -> int:
    """The number the next run of ``task_id`` gets: 1 + the highest number of any run of a
    task with the same name or an equal one (:func:`named_args`, removed ones included).
    Call inside the inserting transaction (the one serial connection makes max + 1
    race-free). Each per-task maximum is one index probe of ``runs_task_number``."""
    row = conn.execute(
        "SELECT max((SELECT max(r.number) FROM runs r WHERE r.task_id = t.id))"
        " FROM tasks t, (SELECT name, name_key FROM tasks WHERE id = ?) me"
        " WHERE t.name = me.name OR t.name_key = me.name_key",
        (task_id,),
    ).fetchone()
    return 1 if row is None or row[0] is None else int(row[0]) + 1


class RunNumberQueries:
    """Find runs by task name and number, newest of a name, or run-id suffix (mixed into
    LocalRunRepository). Each returns run ids only; the caller loads the run."""

    db: Database

    def run_ids_by_number(self, task_name: str, number: int) -> list[str]:
        """Ids of runs numbered ``number`` among tasks named ``task_name`` or an equal name
        (:func:`named_args`; live or removed); normally zero or one. Should both spellings hold
        that number (numbered apart before names were keyed), the exact spelling's win."""
        rows = self.db.read(lambda c: c.execute(
            "SELECT r.id, t.name = ? FROM tasks t JOIN runs r ON r.task_id = t.id"
            " WHERE (t.name = ? OR t.name_key = ?) AND r.number = ? ORDER BY r.id",
            (task_name, *named_args(task_name), number),
        ).fetchall())
        exact = [str(row[0]) for row in rows if row[1]]
        return exact or [str(row[0]) for row in rows]

    def last_run_id(self, task_name: str) -> str | None:
        """The newest run (highest UUIDv7 id, so the last created) of any task named
        ``task_name`` or an equal name (:func:`named_args`), or None when it has none."""
        row = self.db.read(lambda c: c.execute(
            "SELECT max((SELECT max(r.id) FROM runs r WHERE r.task_id = t.id))"
            " FROM tasks t WHERE t.name = ? OR t.name_key = ?",
            named_args(task_name),
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
