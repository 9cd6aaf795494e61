"""Attempts of the local database: the coordinator side of the attempt protocol
(docs/protocols.md §3.2): claim, start intent, handle, finish — each one transaction that moves
the attempt and its run together, with both events (ADR-0069 §2).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``; the run's compare-and-set is ``RunStore``'s.
"""

from __future__ import annotations

import sqlite3

from qinglong.local.storage.event_store import insert_event
from qinglong.local.storage.rows import ATTEMPT_COLUMNS, attempt_from_row
from qinglong.local.storage.run_store import RunStore
from qinglong.shared.domain import Attempt, Run
from qinglong.shared.errors import ConcurrentUpdateError, NotFoundError
from qinglong.shared.ids import uuid7
from qinglong.shared.statuses import (
    AttemptStatus,
    Executor,
    RunStatus,
    check_attempt_transition,
    run_status_for_attempt,
)


class AttemptStore(RunStore):
    """Attempts (mixin; needs ``db`` and ``clock`` of the repository). All methods raise
    StorageError/StorageClosedError/StorageBusyError from the Database."""

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
            insert_event(conn, at, "run_dispatching", task_id=run.task_id, run_id=run.id,
                   from_status=run.status.value, to_status="dispatching")
            insert_event(conn, at, "attempt_claimed", task_id=run.task_id, run_id=run.id,
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
            insert_event(conn, at, "attempt_starting", run_id=attempt.run_id, attempt_id=attempt.id,
                   from_status="claimed", to_status="starting",
                   detail={"deadline_at_ms": deadline_at_ms})
            return self._attempt(conn, attempt.id)

        return self.db.write(op)

    def save_handle(self, attempt: Attempt, handle: str) -> Attempt:
        """Full compare-and-set after launch: attempt ``starting -> running`` with its
        handle, run ``dispatching -> running``, both events (ADR-0069 §2)."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> Attempt:
            run = self._run(conn, attempt.run_id)
            self._set_attempt(conn, attempt, AttemptStatus.RUNNING, at, handle=handle,
                              started_at_ms=at)
            self._set_run(conn, run, RunStatus.RUNNING, at)
            insert_event(conn, at, "attempt_running", run_id=run.id, attempt_id=attempt.id,
                   from_status="starting", to_status="running", detail={"handle": handle})
            insert_event(conn, at, "run_running", task_id=run.task_id, run_id=run.id,
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
            insert_event(conn, at, f"attempt_{outcome.value}", run_id=run.id, attempt_id=attempt.id,
                   from_status=attempt.status.value, to_status=outcome.value, detail=info)
            if retry_not_before_ms is not None:
                self._set_run(conn, run, RunStatus.QUEUED, at, not_before_ms=retry_not_before_ms)
                insert_event(conn, at, "run_requeued", task_id=run.task_id, run_id=run.id,
                       from_status=run.status.value, to_status="queued",
                       detail={"not_before_ms": retry_not_before_ms, "after": outcome.value})
            else:
                target = run_status_for_attempt(outcome)
                self._set_run(conn, run, target, at, finished=True, finished_at_ms=end,
                              exit_code=exit_code, signal=signal)
                insert_event(conn, at, f"run_{target.value}", task_id=run.task_id, run_id=run.id,
                       from_status=run.status.value, to_status=target.value)
            return self._run(conn, run.id)

        return self.db.write(op)
