"""The cluster panel's task form over control's task services (docs/panel.md "Cluster";
DESIGN §4.6): create, show, edit and remove a task and preview a schedule as
``POST/GET/PATCH/DELETE /v1/tasks`` do, on the replica's engine (never HTTP to itself).

The API's own rules decide: a body is validated by the API's models (``TaskCreate``,
``TaskPatch``) and stored by ``task_store`` (``check_definition``, ``check_bundle``); a
refusal becomes :class:`~qinglong.panel.backend.BackendRefusedError` whose ``problems``
name each field and a reason code with its limits (a pydantic error type such as
``greater_than_equal`` with ``{"ge": "1"}``, or ``ApiError.problem``'s code such as
``schedule`` with ``{"part": "minute"}``), never a value, so the panel can say it in the
user's language.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError as ModelError

from qinglong.control.api.errors import ApiError
from qinglong.control.api.task_models import (
    ENV_NAME_PATTERN,
    LABEL_PATTERN,
    NULLABLE_ON_EDIT,
    TaskCreate,
    TaskPatch,
)
from qinglong.panel.backend import BackendRefusedError
from qinglong.shared.names import NAME_RULE

if TYPE_CHECKING:
    from qinglong.control.api.context import ApiContext

#: a pattern of the API's models -> the reason code the panel words
PATTERN_CODES = {ENV_NAME_PATTERN: "env_name", LABEL_PATTERN: "label_key",
                 r"^[0-9a-f]{64}$": "digest", r"^[^\x00]*$": "nul"}
#: the API's own validators' messages -> reason codes
VALUE_CODES = {NAME_RULE: "name_rule", "contains NUL": "nul",
               "is not valid Unicode": "unicode"}
#: ApiError codes that belong to one field (field, reason code)
CODE_FIELDS = {"task_exists": ("name", "task_exists"),
               "bundle_not_found": ("bundle_digest", "bundle_not_found"),
               "entry_point_not_found": ("entry_point", "entry_point_not_found")}
BUNDLES_SHOWN = 50
MEMBERS_SHOWN = 200


def model_problems(exc: ModelError) -> list[dict[str, Any]]:
    """``[{"field": "env.NAME.value", "code", "params"}]`` for a pydantic refusal of the
    API's models: the location joined with dots (``[key]`` dropped: the code says
    ``env_name``/``label_key``), the error type as code (a pattern or our validator's
    message by ``PATTERN_CODES``/``VALUE_CODES``), the schema's limits as params."""
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p != "[key]"]
        kind = str(err.get("type", ""))
        found = err.get("ctx")
        ctx: dict[str, Any] = found if isinstance(found, dict) else {}
        code = kind
        if kind == "string_pattern_mismatch":
            code = PATTERN_CODES.get(str(ctx.get("pattern")), "pattern")
        elif kind == "value_error":
            code = VALUE_CODES.get(str(ctx.get("error", "")), "invalid")
        params = {k: str(v) for k, v in ctx.items()
                  if k in ("ge", "le", "gt", "lt", "max_length", "min_length", "expected")}
        out.append({"field": ".".join(loc), "code": code, "params": params})
    return out


def refused(exc: ApiError) -> BackendRefusedError:
    """An ApiError of the task services as BackendRefusedError (``not_found`` for 404),
    with ``problems`` when it names a field."""
    problems = []
    if exc.problem is not None:
        field, code, params = exc.problem
        problems.append({"field": field, "code": code, "params": params})
    elif exc.code in CODE_FIELDS:
        field, code = CODE_FIELDS[exc.code]
        problems.append({"field": field, "code": code, "params": {}})
    code = "not_found" if exc.status == 404 else exc.code
    return BackendRefusedError(code, exc.message, usage=exc.status in (404, 422),
                               problems=problems)


def _validated(model: type[TaskCreate] | type[TaskPatch], body: dict[str, Any]
               ) -> dict[str, Any]:
    try:
        parsed = model.model_validate(body)
    except ModelError as exc:
        raise BackendRefusedError("invalid_request", "invalid fields", usage=True,
                                  problems=model_problems(exc)) from None
    if isinstance(parsed, TaskPatch):
        return parsed.model_dump(exclude_unset=True)
    return parsed.model_dump()


def task_view(row: Any) -> dict[str, Any]:
    """A task row as the form reads it: ``GET /v1/tasks/{name}``'s fields (secret values
    null) as JSON."""
    from qinglong.control.api.tasks import task_out

    view: dict[str, Any] = task_out(row).model_dump(mode="json")
    return view


def get(ctx: ApiContext, name: str) -> dict[str, Any]:
    """The live task ``name`` (``task_view``); ApiError 404 ``task_not_found``."""
    from qinglong.control.api.task_store import live_task

    with ctx.engine.connect() as conn:
        return task_view(live_task(conn, ctx.project_id, name))


def create(ctx: ApiContext, body: dict[str, Any], by: str) -> dict[str, Any]:
    """Create a task from ``body`` (``POST /v1/tasks``'s JSON) as ``by``; the zone
    defaults as the route's (``--default-timezone``, else UTC). The task (``task_view``)."""
    from qinglong.control.api.task_store import create_task

    values = _validated(TaskCreate, body)
    values.pop("caller_timezone", None)
    if values["timezone"] is None:
        values["timezone"] = ctx.default_timezone or "UTC"
    with ctx.engine.begin() as conn:
        row = create_task(conn, ctx.project_id, values, by,
                          keyring=ctx.extras.get("keyring"))
        return task_view(row)


def edit(ctx: ApiContext, name: str, patch: dict[str, Any], by: str) -> dict[str, Any]:
    """Apply ``patch`` (``PATCH /v1/tasks/{name}``'s JSON) as ``by``; the task."""
    from qinglong.control.api.task_store import edit_task

    values = _validated(TaskPatch, patch)
    with ctx.engine.begin() as conn:
        row = edit_task(conn, ctx.project_id, name, values, NULLABLE_ON_EDIT, by,
                        keyring=ctx.extras.get("keyring"))
        return task_view(row)


def remove(ctx: ApiContext, name: str, by: str) -> dict[str, Any]:
    """Remove the live task ``name`` as ``DELETE /v1/tasks/{name}`` does; ``{"name"}``."""
    from qinglong.control.api.task_store import delete_task

    with ctx.engine.begin() as conn:
        delete_task(conn, ctx.project_id, name, by)
    return {"name": name}


def preview(schedule: str, timezone: str, count: int) -> dict[str, Any]:
    """The next ``count`` (1-100) fire times of an unsaved schedule after this replica's
    clock: ``{"slots": [ISO UTC]}`` (none for ``@once``). The schedule and zone are checked
    by the API's rules (``task_store.check_definition``: ``@boot`` is refused)."""
    from datetime import UTC, datetime

    from qinglong.control.api.task_store import check_definition
    from qinglong.shared.cron import parse_schedule

    if not 1 <= count <= 100:
        raise BackendRefusedError("bad_request", "count must be 1-100", usage=True)
    if not timezone:
        raise BackendRefusedError("invalid_request", "timezone: missing", usage=True,
                                  problems=[{"field": "timezone", "code": "missing",
                                             "params": {}}])
    try:
        check_definition({"argv": ["-"], "schedule": schedule, "timezone": timezone})
    except ApiError as exc:
        raise refused(exc) from None
    slots = parse_schedule(schedule, timezone).next_slots(int(time.time() * 1000), count)
    return {"slots": [datetime.fromtimestamp(s / 1000, UTC).isoformat().replace(
        "+00:00", "Z") for s in slots]}


def bundles(ctx: ApiContext) -> list[dict[str, Any]]:
    """The newest ``BUNDLES_SHOWN`` bundles control knows (``script_bundles``) with their
    regular-file members (at most ``MEMBERS_SHOWN`` each, by path): ``[{"digest",
    "created_at", "created_by", "files": [path]}]``, newest first (the form's entry-point
    picker)."""
    from sqlalchemy import select

    from qinglong.control.db.tables import script_bundles as b

    with ctx.engine.connect() as conn:
        rows = conn.execute(select(b.c.digest, b.c.created_at, b.c.created_by, b.c.members)
                            .order_by(b.c.created_at.desc(), b.c.digest)
                            .limit(BUNDLES_SHOWN)).mappings().all()
    out = []
    for r in rows:
        files = sorted(str(m["path"]) for m in r["members"] if m.get("kind") == "file")
        out.append({"digest": r["digest"], "created_by": r["created_by"],
                    "created_at": r["created_at"].isoformat(), "files": files[:MEMBERS_SHOWN]})
    return out
