"""Row <-> domain record mapping for the local SQLite schema (migrations/sqlite)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from qinglong.shared.domain import Attempt, ConcurrencyPolicy, Event, Run, Task, Trigger
from qinglong.shared.errors import NotFoundError
from qinglong.shared.statuses import AttemptStatus, Executor, RunOwner, RunStatus

TASK_COLUMNS = (
    "id, name, argv_json, schedule, timezone, env_json, cwd, timeout_ms, max_attempts,"
    " concurrency, log_retention_days, labels_json, enabled, misfire_grace_ms,"
    " schedule_cursor_ms, version, created_at_ms, updated_at_ms"
)
RUN_COLUMNS = (
    "r.id, r.task_id, t.name, r.status, r.owner, r.trigger, r.version, r.scheduled_at_ms,"
    " r.not_before_ms, r.created_at_ms, r.finished_at_ms, r.exit_code, r.signal,"
    " r.cancel_requested, r.number"
)
ATTEMPT_COLUMNS = (
    "id, run_id, number, status, executor, version, handle, exit_code, signal, log_path,"
    " deadline_at_ms, created_at_ms, started_at_ms, finished_at_ms"
)
EVENT_COLUMNS = "id, at_ms, kind, task_id, run_id, attempt_id, from_status, to_status, detail"


def task_from_row(row: Sequence[object]) -> Task:
    """Build a Task from a row selected with TASK_COLUMNS."""
    timeout_ms = row[7]
    return Task(
        id=str(row[0]),
        name=str(row[1]),
        argv=tuple(json.loads(str(row[2]))),
        schedule=str(row[3]),
        timezone=str(row[4]),
        env=dict(json.loads(str(row[5]))),
        cwd=None if row[6] is None else str(row[6]),
        timeout_s=None if timeout_ms is None else int(str(timeout_ms)) / 1000,
        max_attempts=int(str(row[8])),
        concurrency=ConcurrencyPolicy(str(row[9])),
        log_retention_days=None if row[10] is None else int(str(row[10])),
        labels=tuple(json.loads(str(row[11]))),
        enabled=bool(row[12]),
        misfire_grace_s=int(str(row[13])) // 1000,
        schedule_cursor_ms=None if row[14] is None else int(str(row[14])),
        version=int(str(row[15])),
        created_at_ms=int(str(row[16])),
        updated_at_ms=int(str(row[17])),
    )


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def attempt_from_row(row: Sequence[object]) -> Attempt:
    """Build an Attempt from a row selected with ATTEMPT_COLUMNS."""
    return Attempt(
        id=str(row[0]),
        run_id=str(row[1]),
        number=int(str(row[2])),
        status=AttemptStatus(str(row[3])),
        executor=Executor(str(row[4])),
        version=int(str(row[5])),
        handle=None if row[6] is None else str(row[6]),
        exit_code=_opt_int(row[7]),
        signal=_opt_int(row[8]),
        log_path=None if row[9] is None else str(row[9]),
        deadline_at_ms=_opt_int(row[10]),
        created_at_ms=int(str(row[11])),
        started_at_ms=_opt_int(row[12]),
        finished_at_ms=_opt_int(row[13]),
    )


def run_from_row(row: Sequence[object], attempts: tuple[Attempt, ...] = ()) -> Run:
    """Build a Run from a row selected with RUN_COLUMNS (runs r JOIN tasks t)."""
    return Run(
        id=str(row[0]),
        task_id=str(row[1]),
        task_name=str(row[2]),
        status=RunStatus(str(row[3])),
        owner=RunOwner(str(row[4])),
        trigger=Trigger(str(row[5])),
        version=int(str(row[6])),
        scheduled_at_ms=_opt_int(row[7]),
        not_before_ms=int(str(row[8])),
        created_at_ms=int(str(row[9])),
        finished_at_ms=_opt_int(row[10]),
        exit_code=_opt_int(row[11]),
        signal=_opt_int(row[12]),
        cancel_requested=bool(row[13]),
        attempts=attempts,
        number=_opt_int(row[14]),
    )


def event_from_row(row: Sequence[object]) -> Event:
    """Build an Event from a row selected with EVENT_COLUMNS."""
    return Event(
        id=str(row[0]),
        at_ms=int(str(row[1])),
        kind=str(row[2]),
        task_id=None if row[3] is None else str(row[3]),
        run_id=None if row[4] is None else str(row[4]),
        attempt_id=None if row[5] is None else str(row[5]),
        from_status=None if row[6] is None else str(row[6]),
        to_status=None if row[7] is None else str(row[7]),
        detail=None if row[8] is None else str(row[8]),
    )


def load_attempts(conn: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, list[Attempt]]:
    """All attempts of the given runs, by run id, in attempt-number order."""
    out: dict[str, list[Attempt]] = {run_id: [] for run_id in run_ids}
    if not run_ids:
        return out
    marks = ",".join("?" * len(run_ids))
    for row in conn.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE run_id IN ({marks})"  # noqa: S608
        " ORDER BY run_id, number",
        tuple(run_ids),
    ):
        attempt = attempt_from_row(row)
        out[attempt.run_id].append(attempt)
    return out


def load_run(conn: sqlite3.Connection, run_id: str) -> Run:
    """The run ``run_id`` with its attempts, read on ``conn``. Raises NotFoundError."""
    row = conn.execute(
        f"SELECT {RUN_COLUMNS} FROM runs r JOIN tasks t ON t.id = r.task_id"  # noqa: S608
        " WHERE r.id = ?",
        (run_id,),
    ).fetchone()
    if row is None:
        raise NotFoundError(f"no such run '{run_id}'")
    return run_from_row(row, tuple(load_attempts(conn, [run_id])[run_id]))
