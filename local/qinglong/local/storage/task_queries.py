"""Task queries beyond create/enable/remove (issue 12 items 1 and 2): editing a task in
place, its history by name, and the overview `task list` and `ql3 local status` show.

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``. An edit keeps the task's id (so its runs, events and run history stay its own)
and is one transaction: the new definition and one ``task_edited`` event naming the fields
changed. A change of schedule or time zone bumps ``version`` (so a scheduler tick that read
the old definition loses its compare-and-set, ``schedule_queries``), moves the schedule cursor
to the edit time (no slot of the old schedule, none before the edit, fires) and marks the next
fire time pending (migration 0004), so a running ``serve`` computes it at its next tick.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence

from qinglong.local.storage.database import Database
from qinglong.local.storage.rows import TASK_COLUMNS, task_from_row
from qinglong.local.storage.run_numbers import named_args
from qinglong.local.storage.schedule_queries import insert_task_event
from qinglong.local.storage.secrets import SecretEntry, write_entries
from qinglong.shared.domain import Task
from qinglong.shared.errors import (
    ConcurrentUpdateError,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from qinglong.shared.names import name_key

_WORDS = "coalesce((SELECT group_concat(value, char(10)) FROM json_each({})), '')"
# the command as shown (shlex.join) too, so a phrase spanning argv words matches
_MATCH = ("deleted_at_ms IS NULL AND instr(ql3_fold(name || char(10) || "
          f"{_WORDS.format('labels_json')} || char(10) || {_WORDS.format('argv_json')}"
          " || char(10) || ql3_command(argv_json)), ?)")


def shown_command(argv_json: str) -> str:
    """A task's argv (its JSON column) as ``task list`` and the panel show it
    (``shlex.join``: ``sh -c 'echo hello'``)."""
    import shlex

    return shlex.join(json.loads(argv_json))


def _check_rename(conn: sqlite3.Connection, task_id: str, name: str) -> None:
    """ConflictError when ``name`` (or an equal name) is another live task's, or a removed
    task's with runs: their numbers would clash with this task's (``TASK#N``)."""
    row = conn.execute(
        "SELECT name, deleted_at_ms IS NULL FROM tasks t WHERE (name = ? OR name_key = ?)"
        " AND id != ? AND (deleted_at_ms IS NULL OR EXISTS (SELECT 1 FROM runs"
        " WHERE task_id = t.id)) ORDER BY deleted_at_ms IS NULL DESC LIMIT 1",
        (name, name_key(name), task_id)).fetchone()
    if row is not None and row[1]:
        raise ConflictError(
            f"a task with that name already exists: '{row[0]}' (names equal"
            " ignoring case and character width are the same name)")
    if row is not None:
        raise ConflictError(f"a removed task named '{row[0]}' keeps its runs under that name"
                            " (run numbers count per name): choose another name")


class TaskQueries:
    """Task edits (mixin; needs ``db`` and ``clock`` of the repository). All methods raise
    StorageError/StorageClosedError/StorageBusyError from the Database."""

    db: Database
    clock: Callable[[], int]

    def edit_task(self, old: Task, new: Task, detail: dict[str, object]) -> Task:
        """:meth:`edit_task_and_secrets` without secret changes; returns the stored task."""
        return self.edit_task_and_secrets(old, new, detail)[0]

    def edit_task_and_secrets(
        self,
        old: Task,
        new: Task,
        detail: dict[str, object],
        secret_env: Mapping[str, SecretEntry] | None = None,
        secret_unset: Sequence[str] = (),
    ) -> tuple[Task, dict[str, object]]:
        """Replace the definition of live task ``old`` (as read) by ``new`` (same id; the
        fields stored are name, argv, schedule, timezone, env, cwd, timeout, max_attempts,
        concurrency and labels), set ``secret_env`` and remove ``secret_unset`` of its secret
        variables (migration 0006), and append a ``task_edited`` event with ``detail`` (field
        names and non-secret old/new values; the caller keeps env values out of it) plus,
        when a secret
        changed, ``secret_env`` in ``changed`` and the names in ``secret_env_set`` /
        ``secret_env_unset`` (names only, never values). All in one transaction; nothing is
        written and no event appended when nothing differs.

        Compare-and-set on ``old.version`` and ``old.updated_at_ms``: ConcurrentUpdateError
        when the task was enabled, disabled, removed or edited meanwhile; NotFoundError when
        it is no longer live; ValidationError when ``secret_unset`` names a secret the task
        lacks, a plain env name would also be a secret, or a reference names a missing global
        variable; ConflictError when a new name equals another live task's, or a removed
        task's that has runs (run numbers count per name, ``run_numbers``). Returns the
        stored task and the event detail (``changed`` empty: no change)."""
        at = max(self.clock(), old.updated_at_ms + 1)  # updated_at_ms moves on every edit
        reschedule = (new.schedule, new.timezone) != (old.schedule, old.timezone)
        entries = dict(secret_env or {})
        unset = list(secret_unset)

        def op(conn: sqlite3.Connection) -> tuple[Task, dict[str, object]]:
            existing = {str(r[0]) for r in conn.execute(
                "SELECT name FROM task_secret_env WHERE task_id = ?", (old.id,))}
            missing = sorted(n for n in unset if n not in existing)
            if missing:
                raise ValidationError("secret_env_unset", "the task has no secret variable "
                                                          f"{', '.join(missing)}")
            kept = (existing - set(unset)) - set(entries)
            clash = sorted(set(new.env) & kept)
            if clash:
                raise ValidationError(
                    "env", f"{', '.join(clash)} is a secret variable of this task: set it with"
                           " --secret-env, or remove it with --unset-secret-env first")
            secrets_changed = (write_entries(conn, old.id, entries, unset, at)
                               if entries or unset else [])
            out = dict(detail)
            fields = detail.get("changed")
            if secrets_changed:
                out["changed"] = [*(fields if isinstance(fields, list) else []), "secret_env"]
                out["secret_env_set"] = sorted(n for n in secrets_changed if n in entries)
                out["secret_env_unset"] = sorted(n for n in secrets_changed if n not in entries)
            if not out.get("changed"):
                return old, out
            if new.name != old.name:
                _check_rename(conn, old.id, new.name)
            cur = conn.execute(
                "UPDATE tasks SET name = ?, name_key = coalesce(?, name_key), labels_json = ?,"
                " argv_json = ?, schedule = ?, timezone = ?, env_json = ?,"
                " cwd = ?, timeout_ms = ?, max_attempts = ?, concurrency = ?, updated_at_ms = ?,"
                " version = version + ?,"
                # a new schedule starts at the edit: nothing before it fires (migration 0004)
                " schedule_cursor_ms = CASE WHEN ? THEN ? ELSE schedule_cursor_ms END,"
                " schedule_replay_until_ms = CASE WHEN ? THEN NULL"
                " ELSE schedule_replay_until_ms END,"
                " next_fire_at_ms = CASE WHEN ? THEN NULL ELSE next_fire_at_ms END,"
                " next_fire_pending = CASE WHEN ? AND enabled = 1 THEN 'new'"
                " WHEN ? THEN NULL ELSE next_fire_pending END"
                " WHERE id = ? AND deleted_at_ms IS NULL AND version = ? AND updated_at_ms = ?",
                (
                    new.name, name_key(new.name) if new.name != old.name else None,
                    json.dumps(list(new.labels)), json.dumps(list(new.argv)), new.schedule,
                    new.timezone,
                    json.dumps(new.env, sort_keys=True), new.cwd,
                    None if new.timeout_s is None else round(new.timeout_s * 1000),
                    new.max_attempts, new.concurrency.value, at, int(reschedule),
                    int(reschedule), at, int(reschedule), int(reschedule),
                    int(reschedule), int(reschedule),
                    old.id, old.version, old.updated_at_ms,
                ),
            )
            if cur.rowcount != 1:
                live = conn.execute(
                    "SELECT 1 FROM tasks WHERE id = ? AND deleted_at_ms IS NULL", (old.id,)
                ).fetchone()
                if live is None:
                    raise NotFoundError(f"no such task '{old.name}'")
                raise ConcurrentUpdateError(
                    f"task '{old.name}' changed meanwhile; read it again and retry")
            insert_task_event(conn, at, "task_edited", old.id, out)
            row = conn.execute(
                f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?", (old.id,)  # noqa: S608
            ).fetchone()
            return task_from_row(row), out

        return self.db.write(op)

    def task_ids_named(self, name: str) -> list[str]:
        """Ids of every task ever called ``name`` or a name equal to it (the live one and
        removed ones; ``run_numbers.named_args``), oldest first: a removed-and-re-added task's
        history stays under its name."""
        return self.db.read(lambda conn: [str(r[0]) for r in conn.execute(
            "SELECT id FROM tasks WHERE name = ? OR name_key = ? ORDER BY created_at_ms, id",
            named_args(name))])

    def task_overview(self, task_ids: list[str]) -> dict[str, tuple[int | None, str | None,
                                                                     str | None]]:
        """Per task id: ``(next_fire_at_ms, next_fire_pending, last_run_id)`` (issue 12
        item 2): the stored next fire time (Unix ms or None) and why it is pending (None:
        up to date), and the id of the task's newest run (None: never ran). Two indexed
        queries, whatever the number of tasks."""

        def op(conn: sqlite3.Connection) -> dict[str, tuple[int | None, str | None, str | None]]:
            out: dict[str, tuple[int | None, str | None, str | None]] = {}
            for start in range(0, len(task_ids), 500):  # under SQLite's variable limit
                chunk = task_ids[start:start + 500]
                marks = ", ".join("?" * len(chunk))
                last = dict(conn.execute(
                    f"SELECT task_id, MAX(id) FROM runs WHERE task_id IN ({marks})"  # noqa: S608
                    " GROUP BY task_id", chunk).fetchall())
                for task_id, nxt, pending in conn.execute(
                    "SELECT id, next_fire_at_ms, next_fire_pending FROM tasks"  # noqa: S608
                    f" WHERE id IN ({marks})", chunk):
                    out[str(task_id)] = (None if nxt is None else int(nxt),
                                         None if pending is None else str(pending),
                                         None if last.get(task_id) is None
                                         else str(last[task_id]))
            return out

        return self.db.read(op)

    def search_tasks(self, needle: str, offset: int, limit: int,
                     order: str = "name") -> tuple[list[Task], int]:
        """Live tasks by name whose name, a label, an argv word or the command as shown
        (``sh -c 'echo hello'``: integration/panel/test_local_fresh_eyes.py) holds
        ``needle`` (already ``casefold()``-ed, without a newline) after ``str.casefold`` —
        the panel's search rule (``LocalService.task_page``), ordered by ``order`` (an
        ORDER BY of ours: ``app/pins.py``) — as ``(the page at offset/limit, total)``.
        Matched in SQL (``json_each`` decodes the JSON columns, one Python ``casefold`` and
        one ``shlex.join`` per row), so only the page's rows are decoded into tasks
        (bench/README.md ``--local``)."""

        def op(conn: sqlite3.Connection) -> tuple[list[Task], int]:
            conn.create_function("ql3_fold", 1, str.casefold, deterministic=True)
            conn.create_function("ql3_command", 1, shown_command, deterministic=True)
            rows = conn.execute(
                f"SELECT {TASK_COLUMNS}, COUNT(*) OVER () FROM tasks WHERE {_MATCH}"  # noqa: S608
                f" ORDER BY {order} LIMIT ? OFFSET ?", (needle, limit, offset)).fetchall()
            total = int(rows[0][-1]) if rows else int(conn.execute(
                f"SELECT COUNT(*) FROM tasks WHERE {_MATCH}", (needle,)).fetchone()[0])  # noqa: S608
            return [task_from_row(r[:-1]) for r in rows], total

        return self.db.read(op)

    def count_live_tasks(self) -> tuple[int, int]:
        """``(live tasks, of them enabled)``."""
        row = self.db.read(lambda conn: conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(enabled), 0) FROM tasks WHERE deleted_at_ms IS NULL"
        ).fetchone())
        return int(row[0]), int(row[1])

    def count_unfinished_runs(self) -> tuple[int, int]:
        """``(queued runs, dispatching or running runs)``."""
        rows = self.db.read(lambda conn: conn.execute(
            "SELECT status, COUNT(*) FROM runs WHERE status IN"
            " ('queued', 'dispatching', 'running') GROUP BY status").fetchall())
        counts = {str(s): int(n) for s, n in rows}
        return counts.get("queued", 0), counts.get("dispatching", 0) + counts.get("running", 0)
