"""Tasks of the local database: create, read, enable/disable and remove (edits:
``task_queries``). A name is found by its key too (``shared/names.py``).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``; disabling a task cancels its queued runs in the same transaction (``RunStore``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping

from qinglong.local.storage.event_store import insert_event
from qinglong.local.storage.rows import TASK_COLUMNS, task_from_row
from qinglong.local.storage.run_store import RunStore
from qinglong.local.storage.secrets import SecretEntry, write_entries
from qinglong.shared.domain import Task
from qinglong.shared.errors import ConflictError, NotFoundError
from qinglong.shared.names import name_key


class TaskStore(RunStore):
    """Tasks (mixin; needs ``db`` and ``clock`` of the repository). All methods raise
    StorageError/StorageClosedError/StorageBusyError from the Database."""

    def create_task(
        self, task: Task, secret_env: Mapping[str, SecretEntry] | None = None
    ) -> Task:
        """Insert a task definition and, in the same transaction, its secret environment
        (migration 0006). Raises ConflictError if a live task has that name, ValidationError
        for a bad secret entry (nothing is stored then)."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Task:
            key = name_key(task.name)
            taken = conn.execute(
                "SELECT name FROM tasks WHERE (name = ? OR name_key = ?) AND deleted_at_ms IS NULL",
                (task.name, key),
            ).fetchone()
            if taken:
                raise ConflictError(
                    f"a task with that name already exists: '{taken[0]}' (names equal"
                    " ignoring case and character width are the same name)")
            conn.execute(
                f"INSERT INTO tasks ({TASK_COLUMNS}, name_key) VALUES "  # noqa: S608
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)",
                (
                    task.id,
                    task.name,
                    json.dumps(list(task.argv)),
                    task.schedule,
                    task.timezone,
                    json.dumps(task.env, sort_keys=True),
                    task.cwd,
                    None if task.timeout_s is None else round(task.timeout_s * 1000),
                    task.max_attempts,
                    task.concurrency.value,
                    task.log_retention_days,
                    json.dumps(list(task.labels)),
                    int(task.enabled),
                    task.misfire_grace_s * 1000,
                    task.schedule_cursor_ms,
                    at,
                    at,
                    key,
                ),
            )
            if secret_env:
                write_entries(conn, task.id, secret_env, (), at)
            insert_event(conn, at, "task_created", task_id=task.id)
            return self._task_by_id(conn, task.id)

        return self.db.write(op)

    @staticmethod
    def _task_by_id(conn: sqlite3.Connection, task_id: str) -> Task:
        row = conn.execute(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?", (task_id,)  # noqa: S608
        ).fetchone()
        if row is None:
            raise NotFoundError("no such task")
        return task_from_row(row)

    @staticmethod
    def _task_by_name(conn: sqlite3.Connection, name: str) -> Task:
        """The live task spelled ``name``, else the one whose key equals its key
        (``shared/names.py``: ``签到１`` finds ``签到1``)."""
        row = conn.execute(
            f"SELECT {TASK_COLUMNS} FROM tasks WHERE deleted_at_ms IS NULL"  # noqa: S608
            " AND (name = ? OR name_key = ?) ORDER BY name = ? DESC LIMIT 1",
            (name, name_key(name), name),
        ).fetchone()
        if row is None:
            raise NotFoundError(f"no such task '{name}'")
        return task_from_row(row)

    def get_task(self, name: str) -> Task:
        """The live task with this name. Raises NotFoundError."""
        return self.db.read(lambda conn: self._task_by_name(conn, name))

    def get_task_by_id(self, task_id: str) -> Task:
        """The task with this id, removed or not. Raises NotFoundError."""
        return self.db.read(lambda conn: self._task_by_id(conn, task_id))

    def list_tasks(self, offset: int = 0, limit: int = -1, order: str = "name") -> list[Task]:
        """Live tasks ordered by name (or ``order``, an ORDER BY of ours: ``app/pins.py``);
        ``offset``/``limit`` (-1: all) page them in SQL."""
        return self.db.read(
            lambda conn: [
                task_from_row(row)
                for row in conn.execute(
                    f"SELECT {TASK_COLUMNS} FROM tasks WHERE deleted_at_ms IS NULL"  # noqa: S608
                    f" ORDER BY {order} LIMIT ? OFFSET ?", (limit, offset)
                )
            ]
        )

    def list_tasks_including_removed(self) -> list[Task]:
        """Every task, removed ones too, ordered by name then id (import bookkeeping)."""
        return self.db.read(
            lambda conn: [
                task_from_row(row)
                for row in conn.execute(
                    f"SELECT {TASK_COLUMNS} FROM tasks ORDER BY name, id"  # noqa: S608
                )
            ]
        )

    def set_task_enabled(self, name: str, enabled: bool) -> Task:
        """Enable or disable a live task (event ``task_enabled``/``task_disabled``).

        Enabling marks its next fire time pending (computed by the next scheduler tick from
        a fresh cursor: nothing missed while disabled fires); disabling clears it
        (migration 0004, issue 10 item 1) and cancels the task's queued runs in the same
        transaction (a run already started goes on). Raises NotFoundError."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Task:
            task = self._task_by_name(conn, name)
            conn.execute(
                "UPDATE tasks SET enabled = ?, version = version + 1, updated_at_ms = ?,"
                " schedule_cursor_ms = CASE WHEN ? THEN NULL ELSE schedule_cursor_ms END,"
                # migration 0004: enabling computes the next fire time anew, disabling clears it
                " next_fire_at_ms = NULL, next_fire_pending = CASE WHEN ? THEN 'new' END"
                " WHERE id = ?",
                (int(enabled), at, int(enabled and not task.enabled), int(enabled), task.id),
            )
            insert_event(conn, at, "task_enabled" if enabled else "task_disabled", task_id=task.id)
            if not enabled:  # nothing of a disabled task starts any more
                for (run_id,) in conn.execute(
                    "SELECT id FROM runs WHERE task_id = ? AND status = 'queued'"
                    " AND status IN ('queued', 'dispatching', 'running')", (task.id,),
                ).fetchall():
                    self._cancel_queued(conn, self._run(conn, str(run_id)), at, "task_disabled")
            return self._task_by_id(conn, task.id)

        return self.db.write(op)

    def remove_task(self, name: str) -> Task:
        """Remove a live task; its runs stay as history; its next fire time is cleared.
        ConflictError while a run is active."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Task:
            task = self._task_by_name(conn, name)
            if conn.execute(
                "SELECT 1 FROM runs WHERE task_id = ? AND status IN"
                " ('queued', 'dispatching', 'running') LIMIT 1",
                (task.id,),
            ).fetchone():
                raise ConflictError("the task has a queued or active run; cancel it first")
            conn.execute(
                "UPDATE tasks SET deleted_at_ms = ?, enabled = 0, version = version + 1,"
                " updated_at_ms = ?, next_fire_at_ms = NULL, next_fire_pending = NULL"
                " WHERE id = ?",
                (at, at, task.id),
            )
            insert_event(conn, at, "task_removed", task_id=task.id)
            return task

        return self.db.write(op)
