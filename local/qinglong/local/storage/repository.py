"""The local run repository: the one object that reads and writes the local database.

Every status change is a compare-and-set on (id, expected status, version) in one transaction
together with its event (docs/architecture.md §2: run and attempt each get one, "双 Event"). A lost
race raises :class:`ConcurrentUpdateError`; nothing is overwritten silently.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from qinglong.local.storage.database import Database
from qinglong.local.storage.dispatch_queries import DispatchQueries
from qinglong.local.storage.journal import ReceiptJournalQueries
from qinglong.local.storage.leftovers import LeftoverQueries
from qinglong.local.storage.retention import RetentionQueries
from qinglong.local.storage.rows import (
    ATTEMPT_COLUMNS,
    EVENT_COLUMNS,
    RUN_COLUMNS,
    TASK_COLUMNS,
    attempt_from_row,
    event_from_row,
    load_attempts,
    load_run,
    run_from_row,
    task_from_row,
)
from qinglong.local.storage.run_numbers import RunNumberQueries, next_run_number
from qinglong.local.storage.schedule_queries import ScheduleQueries
from qinglong.local.storage.secrets import SecretEntry, write_entries
from qinglong.local.storage.task_queries import TaskQueries
from qinglong.shared.domain import Attempt, Event, Run, Task, Trigger
from qinglong.shared.errors import (
    ConcurrentUpdateError,
    ConflictError,
    NotFoundError,
    ValidationError,
)
from qinglong.shared.ids import uuid7, validate_uuid7
from qinglong.shared.names import name_key
from qinglong.shared.statuses import (
    AttemptStatus,
    Executor,
    RunStatus,
    check_attempt_transition,
    check_run_transition,
    run_status_for_attempt,
)

MAX_CANDIDATE_LIMIT = 256


def now_ms() -> int:
    """Wall-clock Unix milliseconds."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class RecoveryCandidate:
    """A runtime-owned run in dispatching/running found at startup (ADR-0067 §1)."""

    run_id: str
    run_status: RunStatus
    active_attempt_count: int


@dataclass(frozen=True, slots=True)
class CandidatePage:
    """``candidates`` ordered by run id; ``truncated`` when more than the limit exist."""

    candidates: tuple[RecoveryCandidate, ...]
    truncated: bool


def _event(
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


class LocalRunRepository(
    ReceiptJournalQueries, RetentionQueries, LeftoverQueries, DispatchQueries, ScheduleQueries,
    RunNumberQueries, TaskQueries,
):
    """Tasks, runs, attempts, events and the receipt journal of one data directory.

    ``clock`` returns Unix milliseconds (injectable for tests). All methods raise
    StorageError/StorageClosedError/StorageBusyError from the underlying Database.
    Implements the ReceiptJournal port (:meth:`register`).
    """

    def __init__(self, db: Database, clock: Callable[[], int] = now_ms) -> None:
        self.db = db
        self.clock = clock

    # -- tasks --------------------------------------------------------------------------

    def create_task(
        self, task: Task, secret_env: Mapping[str, SecretEntry] | None = None
    ) -> Task:
        """Insert a task definition and, in the same transaction, its secret environment
        (migration 0006). Raises ConflictError if a live task has that name, ValidationError
        for a bad secret entry (nothing is stored then)."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Task:
            key = name_key(task.name)
            if conn.execute(
                "SELECT 1 FROM tasks WHERE (name = ? OR name_key = ?) AND deleted_at_ms IS NULL",
                (task.name, key),
            ).fetchone():
                raise ConflictError("a task with that name already exists")
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
            _event(conn, at, "task_created", task_id=task.id)
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

    def list_tasks(self) -> list[Task]:
        """Live tasks ordered by name."""
        return self.db.read(
            lambda conn: [
                task_from_row(row)
                for row in conn.execute(
                    f"SELECT {TASK_COLUMNS} FROM tasks WHERE deleted_at_ms IS NULL"  # noqa: S608
                    " ORDER BY name"
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
            _event(conn, at, "task_enabled" if enabled else "task_disabled", task_id=task.id)
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
            _event(conn, at, "task_removed", task_id=task.id)
            return task

        return self.db.write(op)

    def task_event(self, task_id: str, kind: str, detail: dict[str, object]) -> None:
        """Append a task-level event (for example a slot skipped by policy ``forbid``)."""
        at = self.clock()
        self.db.write(lambda conn: _event(conn, at, kind, task_id=task_id, detail=detail))

    def run_event(self, task_id: str, run_id: str, kind: str, detail: dict[str, object]) -> None:
        """Append an event about an ended run (for example a notification's outcome)."""
        at = self.clock()
        self.db.write(lambda conn: _event(conn, at, kind, task_id=task_id, run_id=run_id,
                                          detail=detail))

    # -- runs ---------------------------------------------------------------------------

    def create_run(
        self,
        task_id: str,
        trigger: Trigger,
        *,
        scheduled_at_ms: int | None = None,
        not_before_ms: int | None = None,
    ) -> Run | None:
        """Queue a run. Returns None when (task, scheduled time) already has one (§3.7)."""
        at = self.clock()
        run_id = uuid7()

        def op(conn: sqlite3.Connection) -> Run | None:
            cur = conn.execute(
                "INSERT INTO runs (id, task_id, trigger, status, scheduled_at_ms, not_before_ms,"
                " created_at_ms, updated_at_ms, number) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (run_id, task_id, trigger.value, scheduled_at_ms, not_before_ms or at, at, at,
                 next_run_number(conn, task_id)),
            )
            if cur.rowcount == 0:
                return None
            _event(
                conn,
                at,
                "run_created",
                task_id=task_id,
                run_id=run_id,
                to_status="queued",
                detail={"trigger": trigger.value, "scheduled_at_ms": scheduled_at_ms},
            )
            return self._run(conn, run_id)

        return self.db.write(op)

    _run = staticmethod(load_run)

    def get_run(self, run_id: str) -> Run:
        """The run with its attempts. Raises NotFoundError, or InvalidIdentifierError for an
        id that is not a UUIDv7."""
        validate_uuid7(run_id, "run_id")  # malformed: InvalidIdentifierError (bad input)
        return self.db.read(lambda conn: self._run(conn, run_id))

    def _runs(self, conn: sqlite3.Connection, where: str, args: tuple[object, ...]) -> list[Run]:
        rows = conn.execute(
            f"SELECT {RUN_COLUMNS} FROM runs r JOIN tasks t ON t.id = r.task_id {where}",  # noqa: S608
            args,
        ).fetchall()
        attempts = load_attempts(conn, [str(row[0]) for row in rows])
        return [run_from_row(row, tuple(attempts[str(row[0])])) for row in rows]

    def list_runs(
        self, task_id: str | None = None, limit: int = 20, status: str | None = None, *,
        task_name: str | None = None, before: str | None = None,
    ) -> list[Run]:
        """Runs newest first (by UUIDv7 id), optionally of one task (by id) or of every task
        ever called ``task_name`` (removed ones included, issue 12 item 1), and/or in one
        ``status`` (a RunStatus value, else ValidationError), and/or older than the run id
        ``before`` (keyset paging, docs/protocols.md §3.8 ``runs_page``); limit 1–1000."""
        limit = max(1, min(limit, 1000))
        clauses: list[str] = []
        args: list[object] = []
        if before is not None:
            clauses.append("r.id < ?")
            args.append(before)
        if task_name is not None:
            clauses.append("r.task_id IN (SELECT id FROM tasks WHERE name = ?)")
            args.append(task_name)
        elif task_id is not None:
            clauses.append("r.task_id = ?")
            args.append(task_id)
        if status is not None:
            try:
                clauses.append("r.status = ?")
                args.append(RunStatus(status).value)
            except ValueError:
                raise ValidationError("status", "not a run status") from None
        where = ("WHERE " + " AND ".join(clauses) + " ") if clauses else ""
        return self.db.read(
            lambda c: self._runs(c, where + "ORDER BY r.id DESC LIMIT ?", (*args, limit))
        )

    def active_runs(self, task_id: str | None = None) -> list[Run]:
        """Runs in dispatching/running (of one task, or all), oldest first."""
        where = "WHERE r.status IN ('dispatching', 'running')"
        if task_id is None:
            return self.db.read(lambda c: self._runs(c, where + " ORDER BY r.id", ()))
        return self.db.read(
            lambda c: self._runs(c, where + " AND r.task_id = ? ORDER BY r.id", (task_id,))
        )

    def queued_runs(self, task_id: str) -> list[Run]:
        """Queued runs of one task, oldest first."""
        return self.db.read(
            lambda c: self._runs(
                c, "WHERE r.status = 'queued' AND r.task_id = ? ORDER BY r.id", (task_id,)
            )
        )

    def next_queued_at(self) -> int | None:
        """The earliest ``not_before`` of any queued runtime-owned run, or None."""
        row = self.db.read(
            lambda c: c.execute(
                "SELECT min(not_before_ms) FROM runs WHERE status = 'queued' AND owner = 'runtime'"
            ).fetchone()
        )
        return None if row is None or row[0] is None else int(row[0])

    def _cancel_queued(self, conn: sqlite3.Connection, run: Run, at: int, reason: str) -> None:
        """Cancel a queued run at once, with its event (inside the caller's transaction)."""
        self._set_run(conn, run, RunStatus.CANCELLED, at, finished=True)
        _event(conn, at, "run_cancelled", task_id=run.task_id, run_id=run.id,
               from_status="queued", to_status="cancelled", detail={"reason": reason})

    def request_cancel(self, run_id: str, reason: str = "user") -> Run:
        """Persist a cancel intent. A queued run is cancelled at once; an active one is
        marked and its executor stops it. Terminal runs raise ConflictError."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Run:
            run = self._run(conn, run_id)
            if run.status is RunStatus.QUEUED:
                self._cancel_queued(conn, run, at, reason)
            elif run.status in (RunStatus.DISPATCHING, RunStatus.RUNNING):
                conn.execute(
                    "UPDATE runs SET cancel_requested = 1, updated_at_ms = ? WHERE id = ?",
                    (at, run.id),
                )
                _event(conn, at, "cancel_requested", task_id=run.task_id, run_id=run.id,
                       detail={"reason": reason})
            else:
                raise ConflictError("the run has already finished")
            return self._run(conn, run_id)

        return self.db.write(op)

    @staticmethod
    def _set_run(
        conn: sqlite3.Connection,
        run: Run,
        target: RunStatus,
        at: int,
        *,
        finished: bool = False,
        finished_at_ms: int | None = None,
        exit_code: int | None = None,
        signal: int | None = None,
        not_before_ms: int | None = None,
    ) -> None:
        check_run_transition(run.status, target)
        cur = conn.execute(
            "UPDATE runs SET status = ?, version = version + 1, updated_at_ms = ?,"
            " finished_at_ms = ?, exit_code = ?, signal = ?,"
            " not_before_ms = coalesce(?, not_before_ms)"
            " WHERE id = ? AND status = ? AND version = ?",
            (
                target.value,
                at,
                (finished_at_ms or at) if finished else None,
                exit_code,
                signal,
                not_before_ms,
                run.id,
                run.status.value,
                run.version,
            ),
        )
        if cur.rowcount != 1:
            raise ConcurrentUpdateError("the run changed concurrently")

    @staticmethod
    def _attempt(conn: sqlite3.Connection, attempt_id: str) -> Attempt:
        row = conn.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE id = ?", (attempt_id,)  # noqa: S608
        ).fetchone()
        if row is None:
            raise NotFoundError("no such attempt")
        return attempt_from_row(row)

    def get_attempt(self, attempt_id: str) -> Attempt:
        """The attempt by id. Raises NotFoundError."""
        return self.db.read(lambda conn: self._attempt(conn, attempt_id))

    @staticmethod
    def _set_attempt(
        conn: sqlite3.Connection, attempt: Attempt, target: AttemptStatus, at: int, **cols: object
    ) -> None:
        check_attempt_transition(attempt.status, target)
        sets = "".join(f", {name} = ?" for name in cols)
        cur = conn.execute(
            f"UPDATE attempts SET status = ?, version = version + 1, updated_at_ms = ?{sets}"  # noqa: S608
            " WHERE id = ? AND status = ? AND version = ?",
            (target.value, at, *cols.values(), attempt.id, attempt.status.value, attempt.version),
        )
        if cur.rowcount != 1:
            raise ConcurrentUpdateError("the attempt changed concurrently")

    # -- the attempt protocol (docs/protocols.md §3.2 coordinator side) ----------------------------

    def claim_attempt(self, run: Run, executor: Executor = Executor.LOCAL_PROCESS) -> Attempt:
        """Move a queued run to dispatching and create its next attempt as ``claimed``.

        Raises ConcurrentUpdateError if the run is no longer the given version.
        """
        at = self.clock()
        attempt_id = uuid7()

        def op(conn: sqlite3.Connection) -> Attempt:
            self._set_run(conn, run, RunStatus.DISPATCHING, at)
            (number,) = conn.execute(
                "SELECT coalesce(max(number), 0) + 1 FROM attempts WHERE run_id = ?", (run.id,)
            ).fetchone()
            conn.execute(
                "INSERT INTO attempts (id, run_id, number, executor, status, created_at_ms,"
                " updated_at_ms) VALUES (?, ?, ?, ?, 'claimed', ?, ?)",
                (attempt_id, run.id, number, executor.value, at, at),
            )
            _event(conn, at, "run_dispatching", task_id=run.task_id, run_id=run.id,
                   from_status=run.status.value, to_status="dispatching")
            _event(conn, at, "attempt_claimed", task_id=run.task_id, run_id=run.id,
                   attempt_id=attempt_id, to_status="claimed", detail={"number": number})
            return self._attempt(conn, attempt_id)

        return self.db.write(op)

    def record_start_intent(
        self, attempt: Attempt, *, log_path: str, deadline_at_ms: int | None
    ) -> Attempt:
        """Persist the start intent: ``claimed -> starting`` with the log path and the
        durable deadline (DESIGN.md §3.3), before the launcher is called."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Attempt:
            self._set_attempt(conn, attempt, AttemptStatus.STARTING, at, log_path=log_path,
                              deadline_at_ms=deadline_at_ms, start_intent_at_ms=at)
            _event(conn, at, "attempt_starting", run_id=attempt.run_id, attempt_id=attempt.id,
                   from_status="claimed", to_status="starting",
                   detail={"deadline_at_ms": deadline_at_ms})
            return self._attempt(conn, attempt.id)

        return self.db.write(op)

    def register(self, run_id: str, attempt_id: str, receipt_path: str) -> None:
        """ReceiptJournal port (ADR-0069 §3): record ``pending`` before the spawn.

        Only for an existing ``local_process`` attempt of that run; the same call twice is
        idempotent; a different path for the same attempt raises ConflictError.
        """
        at = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT run_id, executor FROM attempts WHERE id = ?", (attempt_id,)
            ).fetchone()
            if row is None or row[0] != run_id or row[1] != Executor.LOCAL_PROCESS.value:
                raise NotFoundError("no local_process attempt of that run")
            existing = conn.execute(
                "SELECT run_id, receipt_path FROM local_completion_receipt_journal"
                " WHERE attempt_id = ?",
                (attempt_id,),
            ).fetchone()
            if existing is not None:
                if tuple(existing) != (run_id, receipt_path):
                    raise ConflictError("the attempt is registered with another receipt")
                return
            conn.execute(
                "INSERT INTO local_completion_receipt_journal (attempt_id, run_id, state,"
                " receipt_path, created_at_ms, updated_at_ms) VALUES (?, ?, 'pending', ?, ?, ?)",
                (attempt_id, run_id, receipt_path, at, at),
            )

        self.db.write(op)

    def save_handle(self, attempt: Attempt, handle: str) -> Attempt:
        """Full compare-and-set after launch: attempt ``starting -> running`` with its
        handle, run ``dispatching -> running``, both events (ADR-0069 §2)."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Attempt:
            run = self._run(conn, attempt.run_id)
            self._set_attempt(conn, attempt, AttemptStatus.RUNNING, at, handle=handle,
                              started_at_ms=at)
            self._set_run(conn, run, RunStatus.RUNNING, at)
            _event(conn, at, "attempt_running", run_id=run.id, attempt_id=attempt.id,
                   from_status="starting", to_status="running", detail={"handle": handle})
            _event(conn, at, "run_running", task_id=run.task_id, run_id=run.id,
                   from_status=run.status.value, to_status="running")
            return self._attempt(conn, attempt.id)

        return self.db.write(op)

    def finish_attempt(
        self,
        attempt: Attempt,
        outcome: AttemptStatus,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
        wait_status: int | None = None,
        finished_at_ms: int | None = None,
        detail: dict[str, object] | None = None,
        retry_not_before_ms: int | None = None,
    ) -> Run:
        """One transaction: the attempt's terminal status and the run's (its last attempt's,
        or back to ``queued`` at ``retry_not_before_ms`` for a retry), with both events."""
        at = self.clock()
        end = finished_at_ms or at

        def op(conn: sqlite3.Connection) -> Run:
            run = self._run(conn, attempt.run_id)
            self._set_attempt(conn, attempt, outcome, at, exit_code=exit_code, signal=signal,
                              wait_status=wait_status, finished_at_ms=end)
            info = dict(detail or {})
            info.update(exit_code=exit_code, signal=signal)
            _event(conn, at, f"attempt_{outcome.value}", run_id=run.id, attempt_id=attempt.id,
                   from_status=attempt.status.value, to_status=outcome.value, detail=info)
            if retry_not_before_ms is not None:
                self._set_run(conn, run, RunStatus.QUEUED, at, not_before_ms=retry_not_before_ms)
                _event(conn, at, "run_requeued", task_id=run.task_id, run_id=run.id,
                       from_status=run.status.value, to_status="queued",
                       detail={"not_before_ms": retry_not_before_ms, "after": outcome.value})
            else:
                target = run_status_for_attempt(outcome)
                self._set_run(conn, run, target, at, finished=True, finished_at_ms=end,
                              exit_code=exit_code, signal=signal)
                _event(conn, at, f"run_{target.value}", task_id=run.task_id, run_id=run.id,
                       from_status=run.status.value, to_status=target.value)
            return self._run(conn, run.id)

        return self.db.write(op)

    def resolve_journal(self, attempt_id: str) -> bool:
        """Delete the ``pending`` journal row of a settled attempt (after its receipt file is
        gone). A ``quarantined`` row stays: only the cleanup scanner resolves it, after the
        purge, so the quarantined file is never orphaned (ADR-0069 §4)."""
        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM local_completion_receipt_journal WHERE attempt_id = ?"
                " AND state = 'pending'",
                (attempt_id,),
            )
            return cur.rowcount == 1

        return self.db.write(op)

    def journal_quarantine(
        self, run_id: str, attempt_id: str, quarantine_path: str, purge_at_ms: int
    ) -> None:
        """Persist the quarantine intent of an invalid receipt BEFORE it is moved
        (ADR-0069 §3): state ``quarantined`` with its deterministic path and purge time.
        Idempotent; creates the row if the attempt was never registered."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE local_completion_receipt_journal SET state = 'quarantined',"
                " quarantine_path = ?, purge_at_ms = ?, updated_at_ms = ? WHERE attempt_id = ?",
                (quarantine_path, purge_at_ms, at, attempt_id),
            )
            if cur.rowcount == 0:
                conn.execute(
                    "INSERT INTO local_completion_receipt_journal (attempt_id, run_id, state,"
                    " receipt_path, quarantine_path, purge_at_ms, created_at_ms, updated_at_ms)"
                    " VALUES (?, ?, 'quarantined', '', ?, ?, ?, ?)",
                    (attempt_id, run_id, quarantine_path, purge_at_ms, at, at),
                )
            _event(conn, at, "receipt_quarantined", run_id=run_id, attempt_id=attempt_id,
                   detail={"purge_at_ms": purge_at_ms})

        self.db.write(op)

    def journal_rows(self) -> list[tuple[str, str, str]]:
        """(attempt_id, state, receipt_path) of every journal row (diagnostics, tests)."""
        return self.db.read(
            lambda c: [
                (str(a), str(s), str(p))
                for a, s, p in c.execute(
                    "SELECT attempt_id, state, receipt_path FROM local_completion_receipt_journal"
                    " ORDER BY updated_at_ms, attempt_id"
                )
            ]
        )

    # -- startup recovery source (ADR-0067 §1–§2) ----------------------------------------

    def inspect_candidates(self, limit: int) -> CandidatePage:
        """Runtime-owned runs in dispatching/running ordered by run id, each with its count
        of claimed/starting/running attempts; fetched with ``limit + 1`` for ``truncated``.

        Raises ValueError unless 1 <= limit <= 256.
        """
        if type(limit) is not int or not 1 <= limit <= MAX_CANDIDATE_LIMIT:
            raise ValueError("limit must be 1-256")

        def op(conn: sqlite3.Connection) -> CandidatePage:
            rows = conn.execute(
                "SELECT r.id, r.status, (SELECT count(*) FROM attempts a WHERE a.run_id = r.id"
                " AND a.status IN ('claimed', 'starting', 'running'))"
                " FROM runs r WHERE r.owner = 'runtime' AND r.status IN ('dispatching', 'running')"
                " ORDER BY r.id LIMIT ?",
                (limit + 1,),
            ).fetchall()
            page = tuple(
                RecoveryCandidate(str(r[0]), RunStatus(str(r[1])), int(r[2])) for r in rows[:limit]
            )
            return CandidatePage(page, len(rows) > limit)

        return self.db.read(op)

    # -- events and settings ------------------------------------------------------------

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

    def get_setting(self, key: str) -> str | None:
        """A value of the settings table, or None."""
        row = self.db.read(
            lambda c: c.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        )
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        """Insert or replace a settings value."""
        self.db.write(
            lambda c: c.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        )

    def delete_setting(self, key: str) -> bool:
        """Remove a settings value (back to its default); False if it was not set."""
        return self.db.write(
            lambda c: c.execute("DELETE FROM settings WHERE key = ?", (key,)).rowcount > 0
        )

    # -- global variables (migration 0002) -------------------------------------------------

    def set_global_variable(self, name: str, value: str, source: str) -> bool:
        """Make ``name`` the one enabled ``value`` every task receives (DESIGN.md §3.3;
        :mod:`qinglong.local.storage.variables` for several values). ``name`` must match
        ``[A-Za-z_][A-Za-z0-9_]*``; ``value`` a string without NUL; ``source`` says where it
        came from (for example ``qinglong2``). Returns True when the stored values or
        source changed. Raises ValidationError (which never echoes the value)."""
        from qinglong.local.storage import variables

        before = self.db.read(lambda c: c.execute(
            "SELECT source FROM global_variables WHERE name = ?", (name,)).fetchone())

        def edit(values: variables.Values) -> bool:
            changed = values != [[value, "", True]]  # 1 == True: as read back
            values[:] = [[value, "", True]]
            return changed

        changed = variables.change(self.db, self.clock(), name, edit, source=source)
        return bool(changed or before is None or before[0] != source)

    def global_variables(self) -> dict[str, str]:
        """Every global variable with an enabled value as ``{name: the enabled values joined
        with &}``. The values are secrets: pass them to a task's environment, never to a
        view, a log line or an error message."""
        from qinglong.local.storage.variables import environment

        return self.db.read(environment)

    def list_global_variables(self) -> list[tuple[str, str, int]]:
        """``(name, source, updated_at_ms)`` of every global variable by name (no values)."""
        return self.db.read(
            lambda c: [
                (str(n), str(s), int(u))
                for n, s, u in c.execute(
                    "SELECT name, source, updated_at_ms FROM global_variables ORDER BY name"
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

