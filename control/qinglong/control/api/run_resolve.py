"""``GET /v1/runs/resolve?ref=``: a run named the way people name it (docs/protocols.md §4.5;
issue 13 item 2), for ``ql3 cluster inspect|logs|cancel RUN``.

The forms are ``qinglong.shared.run_refs``' (the same as ``ql3 local``): a full run id,
``TASK#N``, ``TASK@last``, or a unique suffix of the run id of at least 6 hex digits.
Numbers count per task row (``runs.number``, migration 0005), so after a task is removed and
added again under the same name its numbers start again at 1: ``TASK#N`` looks in the live
task of that name, or, when none is live, the most recently created removed one (older runs
stay reachable by id or suffix). ``TASK@last`` is the newest run of any task of that name.

Answers (viewer): 200 the run (``RunOut``); 404 ``run_not_found``; 422 ``invalid_run_ref``
(text that is no reference, or a suffix shorter than 6 hex digits) or ``ambiguous_run`` (a
suffix that several run ids end with). Messages never echo the reference.

Cost: a suffix has no index to use (a UUIDv7 ends in random bits and the schema has no
expression index on the id's end yet), so it is a scan of the project's runs, stopped at the
second match; the other forms use ``runs_task_number_idx`` and ``runs_task_created_idx``.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from sqlalchemy import Select, cast, or_, select
from sqlalchemy.types import Text

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.models_common import ERRORS, ErrorBody
from qinglong.control.api.run_models import RunOut
from qinglong.control.api.runs import run_out, runs_with_task
from qinglong.control.api.security import require
from qinglong.control.auth.tokens import Principal
from qinglong.control.db.tables import runs, tasks
from qinglong.shared.names import name_key
from qinglong.shared.run_refs import FORMS_HINT, NoSuchRunError, RunRef, parse_run_ref

router = APIRouter(tags=["runs"], responses=ERRORS)
Viewer = Annotated[Principal, Depends(require("viewer"))]
NOT_FOUND = "no run matches this reference"


def _query(project_id: str, ref: RunRef) -> Select[Any]:
    """The statement finding the run(s) ``ref`` names (at most 2 rows: a second one means
    an ambiguous suffix)."""
    query = runs_with_task(project_id)
    if ref.kind == "id":
        return query.where(runs.c.id == ref.value)
    if ref.kind == "suffix":
        return (query.where(cast(runs.c.id, Text).like("%" + ref.value))
                .order_by(runs.c.id).limit(2))
    named = select(tasks.c.id).where(tasks.c.project_id == project_id,
                                     or_(tasks.c.name == ref.task,
                                         tasks.c.name_key == name_key(ref.task)))
    if ref.kind == "number":
        newest_task = (named.order_by(tasks.c.deleted_at.is_(None).desc(), tasks.c.id.desc())
                       .limit(1).scalar_subquery())
        return query.where(runs.c.task_id == newest_task, runs.c.number == ref.number)
    return query.where(runs.c.task_id.in_(named)).order_by(runs.c.id.desc()).limit(1)


@router.get("/v1/runs/resolve", response_model=RunOut, responses={
    422: {"model": ErrorBody, "description": "invalid_run_ref or ambiguous_run"}})
def resolve_run(request: Request, _who: Viewer,
                ref: Annotated[str, Query(min_length=1, max_length=300)]) -> RunOut:
    """The run ``ref`` names: a run id, ``TASK#N``, ``TASK@last`` or the last 6+ hex digits
    of a run id (404 ``run_not_found``, 422 ``invalid_run_ref`` / ``ambiguous_run``)."""
    try:
        parsed = parse_run_ref(ref)
    except NoSuchRunError as exc:
        hint = FORMS_HINT.strip(" ()") if str(exc).endswith(FORMS_HINT) else \
            "a run-id suffix needs at least 6 hex digits"
        raise ApiError(422, "invalid_run_ref", f"not a run reference: {hint}") from None
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        rows = list(conn.execute(_query(ctx.project_id, parsed)).mappings())
    if not rows:
        raise ApiError(404, "run_not_found", NOT_FOUND)
    if len(rows) > 1:
        raise ApiError(422, "ambiguous_run", "several run ids end with this suffix; give more "
                                             "digits or use TASK#N")
    return run_out(rows[0])
