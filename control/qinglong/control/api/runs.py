"""Run and attempt routes: filtered keyset pages, detail with attempts and events, cancel
(docs/architecture.md §2; docs/protocols.md §4.2, §4.5; issue 11 item 7).

Pages are newest first by id (UUIDv7, time-ordered); ``cursor`` is the last id seen and
``limit`` at most 200. Filters are Core ``select`` over ``db/tables.py``. Runs of removed
tasks stay readable (a name filter matches live and removed tasks of that name).

Cancel (operator): a queued run becomes ``cancelled`` at once with its event and retention
enrollment, in one transaction (200); a dispatching or running run gets
``cancel_requested_at`` (the worker learns it from its heartbeat answer) and the answer is
202; a finished run is 409 ``already_finished``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request, Response
from sqlalchemy import RowMapping, Select, exists, func, or_, select, update

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.models_common import ERRORS, ErrorBody
from qinglong.control.api.run_models import (
    ACTIVE,
    AttemptOut,
    EventOut,
    RunDetail,
    RunOut,
    RunPage,
    RunStatus,
)
from qinglong.control.api.security import require
from qinglong.control.auth.tokens import Principal
from qinglong.control.db.tables import (
    attempts,
    events,
    run_attempt_log_artifacts,
    runs,
    tasks,
    worker_incarnations,
)
from qinglong.shared.ids import uuid7
from qinglong.shared.names import name_key

router = APIRouter(tags=["runs"], responses=ERRORS)
Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]


def runs_with_task(project_id: str) -> Select[Any]:
    """Runs of the project joined with their task's name (``task_name``)."""
    return (select(*runs.c, tasks.c.name.label("task_name"))
            .join(tasks, tasks.c.id == runs.c.task_id)
            .where(runs.c.project_id == project_id))


def run_out(row: RowMapping) -> RunOut:
    """The answer for one run row (joined with its task's name)."""
    fields = {f: row[f] for f in RunOut.model_fields if f not in ("id", "task_id")}
    return RunOut(id=str(row["id"]), task_id=str(row["task_id"]), **fields)


def _attempts(project_id: str) -> Select[Any]:
    """Attempts of the project's runs with ``has_log`` and ``worker_name`` (the name of the
    incarnation that claimed it; NULL when none did)."""
    has_log = exists().where(run_attempt_log_artifacts.c.attempt_id == attempts.c.id)
    return (select(*attempts.c, has_log.label("has_log"),
                   worker_incarnations.c.name.label("worker_name"))
            .join(runs, runs.c.id == attempts.c.run_id)
            .outerjoin(worker_incarnations,
                       worker_incarnations.c.id == attempts.c.worker_incarnation_id)
            .where(runs.c.project_id == project_id))


def attempt_out(row: RowMapping) -> AttemptOut:
    """The answer for one attempt row (never its lease token or completion document)."""
    ids = ("id", "run_id", "worker_incarnation_id")
    fields: dict[str, Any] = {f: row[f] for f in AttemptOut.model_fields if f not in ids}
    fields.update({f: str(row[f]) if row[f] else None for f in ids})
    return AttemptOut(**fields)


@router.get("/v1/runs", response_model=RunPage)
def get_runs(
    request: Request, _who: Viewer,
    task: Annotated[str | None, Query(min_length=1, max_length=512)] = None,
    status: RunStatus | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    cursor: UUID | None = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> RunPage:
    """Runs newest first, filtered by task name, status and creation time
    (``created_after`` ≤ created_at < ``created_before``); keyset pages."""
    ctx = get_context(request)
    query = runs_with_task(ctx.project_id)
    if task is not None:
        query = query.where(or_(tasks.c.name == task, tasks.c.name_key == name_key(task)))
    if status is not None:
        query = query.where(runs.c.status == status)
    if created_after is not None:
        query = query.where(runs.c.created_at >= created_after)
    if created_before is not None:
        query = query.where(runs.c.created_at < created_before)
    if cursor is not None:
        query = query.where(runs.c.id < str(cursor))
    with ctx.engine.connect() as conn:
        rows = list(conn.execute(query.order_by(runs.c.id.desc()).limit(limit)).mappings())
    items = [run_out(r) for r in rows]
    return RunPage(items=items, next_cursor=items[-1].id if len(items) == limit else None)


def _run(conn: Any, project_id: str, run_id: UUID, *, lock: bool = False) -> RowMapping:
    query = runs_with_task(project_id).where(runs.c.id == str(run_id))
    if lock:
        query = query.with_for_update(of=runs)
    row: RowMapping | None = conn.execute(query).mappings().first()
    if row is None:
        raise ApiError(404, "run_not_found", "no run has this id")
    return row


@router.get("/v1/runs/{run_id}", response_model=RunDetail)
def get_run(run_id: UUID, request: Request, _who: Viewer) -> RunDetail:
    """One run with its attempts and events."""
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        row = _run(conn, ctx.project_id, run_id)
        tries = conn.execute(_attempts(ctx.project_id).where(attempts.c.run_id == row["id"])
                             .order_by(attempts.c.number)).mappings()
        history = conn.execute(select(events).where(events.c.run_id == row["id"])
                               .order_by(events.c.at, events.c.id)).mappings()
        return RunDetail(
            **run_out(row).model_dump(), attempts=[attempt_out(a) for a in tries],
            events=[EventOut(kind=e["kind"], from_status=e["from_status"],
                             to_status=e["to_status"], at=e["at"], detail=e["detail"],
                             attempt_id=str(e["attempt_id"]) if e["attempt_id"] else None)
                    for e in history])


@router.post("/v1/runs/{run_id}/cancel", response_model=RunOut, responses={
    202: {"model": RunOut, "description": "cancel requested: the worker stops the attempt"},
    409: {"model": ErrorBody, "description": "already_finished"}})
def cancel_run(run_id: UUID, request: Request, response: Response, who: Operator) -> RunOut:
    """Cancel a run (operator): queued → cancelled now (200); dispatching/running →
    cancel requested (202); finished → 409 ``already_finished``."""
    ctx = get_context(request)
    with ctx.engine.begin() as conn:
        if not cancel_in(conn, ctx.project_id, run_id, who.name):
            response.status_code = 202
        return run_out(_run(conn, ctx.project_id, run_id))


def cancel_in(conn: Any, project_id: str, run_id: UUID, by: str) -> bool:
    """Cancel a run inside the caller's transaction (``cancel_run``'s rules; also the
    cluster panel's Stop): True when a queued run is now ``cancelled``, False when a
    dispatching or running run was asked to stop. ApiError 404 ``run_not_found``, 409
    ``already_finished``."""
    from qinglong.control.retention.enrollment import enroll_run

    row = _run(conn, project_id, run_id, lock=True)
    if row["status"] not in ACTIVE:
        raise ApiError(409, "already_finished", "the run has already finished")
    if row["status"] == "queued":
        conn.execute(update(runs).where(runs.c.id == row["id"]).values(
            status="cancelled", finished_at=func.now(), updated_at=func.now(),
            cancel_requested_at=func.coalesce(runs.c.cancel_requested_at, func.now()),
            version=runs.c.version + 1))
        conn.execute(events.insert().values(
            id=uuid7(), run_id=row["id"], kind="cancelled", from_status="queued",
            to_status="cancelled", detail={"by": by}))
        # earlier attempts' logs (a retry was queued) enroll with the terminal run
        enroll_run(conn, str(row["id"]))
        return True
    if row["cancel_requested_at"] is None:
        conn.execute(update(runs).where(runs.c.id == row["id"]).values(
            cancel_requested_at=func.now(), updated_at=func.now()))
        conn.execute(events.insert().values(
            id=uuid7(), run_id=row["id"], kind="cancel_requested",
            from_status=row["status"], to_status=row["status"],
            detail={"by": by}))
    return False


@router.get("/v1/attempts/{attempt_id}", response_model=AttemptOut)
def get_attempt(attempt_id: UUID, request: Request, _who: Viewer) -> AttemptOut:
    """One attempt (never its lease token)."""
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        row = conn.execute(_attempts(ctx.project_id).where(attempts.c.id == str(attempt_id))
                           ).mappings().first()
    if row is None:
        raise ApiError(404, "attempt_not_found", "no attempt has this id")
    return attempt_out(row)
