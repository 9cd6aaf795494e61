"""Task routes: CRUD, run now, enable/disable, the occurrence ledger (docs/protocols.md §4.2, §4.5).

Scopes: reads need ``viewer``; run now, enable and disable need ``operator``; create, edit
and delete need ``admin``. Secret env values are never answered (``EnvValueOut``). Rules of
the stored definition live in ``task_store.py``.
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any
from uuid import UUID

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from sqlalchemy import ColumnElement, RowMapping, Text, cast, literal_column, or_, select

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.models_common import ERRORS, ErrorBody, RunRef
from qinglong.control.api.security import authorize, bearer_token, require
from qinglong.control.api.task_last_run import last_run_of, last_run_out, with_last_run
from qinglong.control.api.task_models import (
    NULLABLE_ON_EDIT,
    EnvValueOut,
    OccurrenceOut,
    OccurrencePage,
    TaskCreate,
    TaskDetail,
    TaskEventOut,
    TaskItem,
    TaskOut,
    TaskPage,
    TaskPatch,
)
from qinglong.control.api.task_store import (
    create_task,
    delete_task,
    edit_task,
    history,
    live_task,
    record_event,
    set_enabled,
)
from qinglong.control.auth.tokens import Principal
from qinglong.control.db.tables import occurrences, tasks
from qinglong.control.scheduling.errors import TaskDeletedError
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7

router = APIRouter(tags=["tasks"], responses=ERRORS)
# A name in a path or query is looked up, never stored: any text up to 512 characters (an
# invalid name simply names no task, 404); lookups go by the name's key (shared/names.py).
TaskNameParam = Annotated[str, Query(min_length=1, max_length=512)]
TaskName = Annotated[str, Path(min_length=1, max_length=512, examples=["京东签到"])]
LabelFilter = Annotated[list[str] | None, Query(max_length=32, examples=[["platform=京东"]])]
SearchText = Annotated[str | None, Query(min_length=1, max_length=200)]
Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]
Admin = Annotated[Principal, Depends(require("admin"))]
Limit = Annotated[int, Query(ge=1, le=200)]


def like_escape(text: str) -> str:
    """``text`` for a LIKE pattern with ``\\`` as escape: ``%``, ``_`` and ``\\`` match
    themselves."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


# shlex.quote in SQL: a word of only [A-Za-z0-9_@%+=:,./-] as it is, else in single quotes
# with each ' written '"'"' ('' for an empty word); words joined by one space, in order
_COMMAND_SQL = (
    "(SELECT string_agg(CASE WHEN w ~ '^[A-Za-z0-9_@%+=:,./-]+$' THEN w ELSE"
    " '''' || replace(w, '''', '''\"''\"''') || '''' END, ' ' ORDER BY n)"
    " FROM jsonb_array_elements_text(tasks.argv) WITH ORDINALITY AS a(w, n))")


def command_shown() -> ColumnElement[str]:
    """A task row's argv as ``ql3 cluster task list`` and the panel show it
    (``shlex.join``: ``sh -c 'echo hello'``), computed in SQL for a search to match a
    phrase spanning words; NULL for a task without argv (a shell line or a bundle).
    Source rule: docs/protocols.md "Listing tasks",
    integration/panel/test_cluster_panel_fresh_eyes.py."""
    return literal_column(_COMMAND_SQL)


def task_out(row: RowMapping) -> TaskOut:
    """The answer for one task row; secret values become null. # docs/protocols.md §4.5"""
    env = {name: EnvValueOut(value=None if e.get("secret") else e.get("value"),
                             secret=bool(e.get("secret")))
           for name, e in dict(row["env"]).items()}
    fields = {f: row[f] for f in TaskOut.model_fields if f not in ("env", "id")}
    return TaskOut(id=str(row["id"]), env=env, **fields)


def _detail(conn: Any, row: RowMapping) -> TaskDetail:
    """A task row with its last run and its history (two indexed queries)."""
    events = [TaskEventOut(kind=e["kind"], detail=dict(e["detail"]), at=e["at"])
              for e in history(conn, str(row["id"]))]
    return TaskDetail(**task_out(row).model_dump(), last_run=last_run_of(conn, str(row["id"])),
                      history=events)


@router.post("/v1/tasks", status_code=201, response_model=TaskDetail)
def post_task(body: TaskCreate, request: Request, who: Admin) -> TaskDetail:
    """Create a task (admin). 409 ``task_exists`` when a live task has the name."""
    ctx = get_context(request)
    values = body.model_dump()
    caller = values.pop("caller_timezone")
    if values["timezone"] is None:
        values["timezone"] = ctx.default_timezone or caller or "UTC"
    with ctx.engine.begin() as conn:
        row = create_task(conn, ctx.project_id, values, who.name,
                          keyring=ctx.extras.get("keyring"))
        return _detail(conn, row)


@router.get("/v1/tasks", response_model=TaskPage)
def get_tasks(request: Request, _who: Viewer, cursor: TaskNameParam | None = None,
              limit: Limit = 50, label: LabelFilter = None,
              q: SearchText = None) -> TaskPage:
    """Live tasks ordered by name, each with its last run (one query per page:
    ``task_last_run.py``); keyset pages (``cursor``: the last name seen).

    ``label=k=v`` (repeatable): only tasks carrying every one of those labels (AND; JSONB
    containment through the GIN index of migration 0008). ``q``: only tasks whose name or
    command holds the text, case-insensitive (a scan of the project's live tasks, bounded by
    ``limit``; bench/task_search.py measures it at 10,000 tasks). 422 ``invalid_request``
    for a label filter without ``=``. # docs/protocols.md §4.5"""
    for text in [q or "", cursor or "", *(label or [])]:
        if "\x00" in text or _unstorable(text):
            raise ApiError(422, "invalid_request",
                           "q, label and cursor must be text PostgreSQL can hold (no NUL)")
    ctx = get_context(request)
    query = with_last_run(select(tasks)).where(tasks.c.project_id == ctx.project_id,
                                tasks.c.deleted_at.is_(None))
    wanted: dict[str, str] = {}
    for item in label or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ApiError(422, "invalid_request", "label: give each filter as key=value")
        wanted[key] = unicodedata.normalize("NFC", value)
    if wanted:
        query = query.where(tasks.c.labels.contains(wanted))
    if q is not None:
        pattern = "%" + like_escape(q) + "%"
        query = query.where(or_(tasks.c.name.ilike(pattern, escape="\\"),
                                tasks.c.shell.ilike(pattern, escape="\\"),
                                cast(tasks.c.argv, Text).ilike(pattern, escape="\\"),
                                command_shown().ilike(pattern, escape="\\")))
    if cursor is not None:
        query = query.where(tasks.c.name > cursor)
    with ctx.engine.connect() as conn:
        rows = list(conn.execute(query.order_by(tasks.c.name).limit(limit)).mappings())
    items = [TaskItem(**task_out(r).model_dump(), last_run=last_run_out(r)) for r in rows]
    return TaskPage(items=items, next_cursor=items[-1].name if len(items) == limit else None)


@router.get("/v1/tasks/{name}", response_model=TaskDetail)
def get_task(name: TaskName, request: Request, _who: Viewer) -> TaskDetail:
    """One live task with its last run and its history (newest first)."""
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        return _detail(conn, live_task(conn, ctx.project_id, name))


@router.patch("/v1/tasks/{name}", response_model=TaskDetail,
              responses={409: {"model": ErrorBody, "description": (
                  "task_changed: the body's version is not the task's any more (someone "
                  "changed it since it was read; nothing changed); task_exists: the new "
                  "name is a live task's")}})
def patch_task(name: TaskName, body: TaskPatch, request: Request, who: Admin) -> TaskDetail:
    """Edit a task in place (admin): same id, history kept, an ``edited`` event. With
    ``version`` a stale edit is 409 ``task_changed``; ``name`` renames (409
    ``task_exists`` when taken). # docs/protocols.md §4.5, Editing a task"""
    ctx = get_context(request)
    patch = body.model_dump(exclude_unset=True)
    with ctx.engine.begin() as conn:
        row = edit_task(conn, ctx.project_id, name, patch, NULLABLE_ON_EDIT, who.name,
                        keyring=ctx.extras.get("keyring"))
        return _detail(conn, row)


@router.delete("/v1/tasks/{name}", status_code=204, response_class=Response)
def remove_task(name: TaskName, request: Request, who: Admin) -> Response:
    """Remove a task (admin; soft: history stays readable, the name is free again)."""
    ctx = get_context(request)
    with ctx.engine.begin() as conn:
        delete_task(conn, ctx.project_id, name, who.name)
    return Response(status_code=204)


@router.post("/v1/tasks/{name}/enable", response_model=TaskOut)
def enable_task(name: TaskName, request: Request, who: Operator) -> TaskOut:
    """Enable (operator): the next fire time is computed now."""
    ctx = get_context(request)
    with ctx.engine.begin() as conn:
        return task_out(set_enabled(conn, ctx.project_id, name, True, who.name))


@router.post("/v1/tasks/{name}/disable", response_model=TaskOut)
def disable_task(name: TaskName, request: Request, who: Operator) -> TaskOut:
    """Disable (operator): nothing fires until enabled again."""
    ctx = get_context(request)
    with ctx.engine.begin() as conn:
        return task_out(set_enabled(conn, ctx.project_id, name, False, who.name))


IDEMPOTENCY_KEY = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"


@router.post("/v1/tasks/{name}/run", status_code=201, response_model=RunRef,
             responses={409: {"model": ErrorBody, "description": (
                 "run_refused: the task's concurrency_policy is forbid and a run of it is "
                 "queued, dispatching or running; idempotency_key_expired: the run an "
                 "earlier request with this Idempotency-Key made is no longer kept")}})
def run_task(name: TaskName, request: Request, response: Response,
             token: Annotated[str, Depends(bearer_token)],
             idempotency_key: Annotated[str | None, Header(
                 alias=IDEMPOTENCY_KEY, description=(
                     "1 to 255 visible ASCII characters (a UUID): a request with the same "
                     "key for the same task within 24 hours answers the first one's run, "
                     "with header Idempotent-Replayed: true, and makes none"))] = None,
             ) -> RunRef:
    """Run now (operator): a queued run with trigger ``manual``, its number answered; a
    ``run_requested`` task event. The task's concurrency policy applies, decided under the
    task row's lock: ``forbid`` with a run queued, dispatching or running answers 409
    ``run_refused`` (nothing created); ``allow`` creates; ``replace`` creates and cancels
    the queued runs, asking the dispatching or running ones to stop. With an
    ``Idempotency-Key`` a retry answers the run the first request made (docs/protocols.md
    §4.5); a key that is not 1..255 visible ASCII characters is 422 ``invalid_request``.
    The operator token is read as the transaction's first statement (one transaction)."""
    from qinglong.control.livelog.hub import hub_of
    from qinglong.control.livelog.wakeups import CLAIMABLE
    from qinglong.control.scheduling.errors import RunRefusedError
    from qinglong.control.scheduling.firing import run_now
    from qinglong.control.scheduling.run_creation import claim_request_key, requested_run

    ctx = get_context(request)
    run_id = uuid7()
    with ctx.engine.begin() as conn:
        who = authorize(conn, token, "operator")
        task = live_task(conn, ctx.project_id, name)
        task_id = str(task["id"])
        if idempotency_key is not None:
            try:
                fresh = claim_request_key(conn, task_id=task_id, key=idempotency_key,
                                          run_id=run_id)
            except ValidationError:
                raise ApiError(422, "invalid_request", f"{IDEMPOTENCY_KEY} must be 1 to 255 "
                               "visible ASCII characters") from None
            if not fresh:
                earlier = requested_run(conn, task_id=task_id, key=idempotency_key)
                if earlier is None:
                    raise ApiError(409, "idempotency_key_expired", "the run this key made "
                                   "is no longer kept; send the request with a new key")
                response.headers[REPLAYED_HEADER] = "true"
                return RunRef(id=earlier[0], number=earlier[1])
        record_event(conn, task_id, "run_requested", by=who.name)
        try:  # the last statement before the commit (scheduling/firing.py run_now)
            created = run_now(conn, task_id, policy=str(task["concurrency_policy"]),
                              run_id=run_id)
        except RunRefusedError as exc:
            which = f"run {task['name']}#{exc.number}" if exc.number else "a run of it"
            raise ApiError(409, "run_refused", f"{which} is {exc.status or 'in progress'} "
                           "and the task's concurrency policy is forbid") from None
        except TaskDeletedError:
            raise ApiError(404, "task_not_found", "no live task has this name") from None
    # committed: its NOTIFY wakes claims waiting anywhere; this wakes this replica's at once
    # (also when it runs without a listener)
    hub_of(ctx.extras).wakeups.wake(CLAIMABLE)
    return RunRef(id=str(created.run_id), number=created.number)


@router.get("/v1/tasks/{name}/occurrences", response_model=OccurrencePage)
def get_occurrences(name: TaskName, request: Request, _who: Viewer,
                    cursor: UUID | None = None,
                    limit: Limit = 50) -> OccurrencePage:
    """The task's occurrence ledger, newest first; keyset pages (``cursor``: last id)."""
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        task = live_task(conn, ctx.project_id, name)
        query = select(occurrences).where(occurrences.c.task_id == task["id"])
        if cursor is not None:
            query = query.where(occurrences.c.id < str(cursor))
        rows = list(conn.execute(query.order_by(occurrences.c.id.desc()).limit(limit))
                    .mappings())
    items = [OccurrenceOut(**{**dict(r), "id": str(r["id"]),
                              "run_id": str(r["run_id"]) if r["run_id"] else None})
             for r in rows]
    return OccurrencePage(items=items,
                          next_cursor=items[-1].id if len(items) == limit else None)


def _unstorable(text: str) -> bool:
    """True for text PostgreSQL cannot hold: a lone surrogate (NUL is checked by the caller)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
