"""Runs of the local database: queue, read, cancel, and the compare-and-set of a run's
status (docs/architecture.md §2), plus the startup recovery source (ADR-0067 §1–§2).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``. Every status change is a compare-and-set on (id, expected status, version) in
one transaction with its event; a lost race raises ConcurrentUpdateError.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from qinglong.local.storage.database import Database
from qinglong.local.storage.event_store import insert_event
from qinglong.local.storage.rows import RUN_COLUMNS, load_attempts, load_run, run_from_row
from qinglong.local.storage.run_numbers import named_args, next_run_number
from qinglong.shared.domain import Run, Trigger
from qinglong.shared.errors import ConcurrentUpdateError, ConflictError, ValidationError
from qinglong.shared.ids import uuid7, validate_uuid7
from qinglong.shared.statuses import RunStatus, check_run_transition

MAX_CANDIDATE_LIMIT = 256


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


class RunStore:
    """Runs (mixin; needs ``db`` and ``clock`` of the repository). All methods raise
    StorageError/StorageClosedError/StorageBusyError from the Database."""

    db: Database
    clock: Callable[[], int]

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
            insert_event(
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
        ever called ``task_name`` or a name equal to it (``run_numbers.named_args``; removed
        ones included), and/or in one ``status`` (a
        RunStatus value, else ValidationError), and/or older than the run id ``before``
        (keyset paging, docs/protocols.md §3.8 ``runs_page``); limit 1–1000."""
        limit = max(1, min(limit, 1000))
        clauses: list[str] = []
        args: list[object] = []
        if before is not None:
            clauses.append("r.id < ?")
            args.append(before)
        if task_name is not None:
            clauses.append("r.task_id IN (SELECT id FROM tasks WHERE name = ? OR name_key = ?)")
            args.extend(named_args(task_name))
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
        insert_event(conn, at, "run_cancelled", task_id=run.task_id, run_id=run.id,
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
                insert_event(conn, at, "cancel_requested", task_id=run.task_id, run_id=run.id,
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
