"""Global-variable routes (docs/protocols.md §4.5 "Global variables"), Qinglong's 环境变量.

Scopes: writes need ``operator``; ``GET /v1/vars`` needs ``viewer`` and answers names, pool
scopes, remarks and flags. Values leave only through the export: a plain variable's to a
viewer, a secret one's to an admin who asks for them (``include_secrets=true``); no other
answer, no error, event or log line carries a value. A value comes in a JSON body (the CLI
reads it from stdin, never argv).

* ``GET /v1/vars``: every variable with its values' index, remark and enabled flag.
* ``GET /v1/vars/export``: ``text/plain`` ``NAME=value`` lines (docs/panel.md "Pages",
  Variables: ``# remark`` before a value, shell double quotes when needed) of the enabled,
  one-line values of every plain variable by name, then position; ``include_secrets=true``
  (admin only, else 403 ``forbidden``) adds the secret variables' values and is logged with
  the token's name (never a value).
* ``POST /v1/vars/{name}``: ``{"value", "remark"?, "index"?, "add"?, "secret"?,
  "pools"?}`` stores a value (``add``: a new last one, unless the variable already holds
  this value: then nothing is added and ``changed`` is 0; ``index``: replace that one;
  neither: the variable becomes this one value); ``pools`` present sets the scope (null:
  every pool). Answers ``{"name", "index", "changed"}``.
* ``POST /v1/vars/{name}/pools``: ``{"pools": [POOL, ...] | null}`` sets the variable's
  scope alone, values untouched (null: every pool again). Answers ``{"name", "pools"}``.
* ``POST /v1/vars/{name}/enable`` and ``/disable``: ``{"index"?}`` (none: every value).
* ``DELETE /v1/vars/{name}?index=N``: the variable, or its value #N.

Refusals: 422 ``invalid_variable`` naming the limit (an empty value, a value over 128 KiB,
a pool's variables over 1 MiB), 404 ``not_found``.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.security import require
from qinglong.control.api.task_models import ENV_NAME_PATTERN
from qinglong.control.api.task_models import _storable as storable
from qinglong.control.api.token_routes import POOL_PATTERN
from qinglong.control.auth.tokens import Principal
from qinglong.control.db import variables as store
from qinglong.shared.errors import NotFoundError, ValidationError

_log = logging.getLogger("qinglong.control.api")
router = APIRouter(tags=["vars"])
Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]
Name = Annotated[str, Path(pattern=ENV_NAME_PATTERN)]


class ValueIn(BaseModel):
    """A value to store (a secret: never echoed in an error)."""

    model_config = ConfigDict(extra="forbid")
    value: Annotated[str, Field(max_length=store.VALUE_MAX_BYTES), AfterValidator(storable)]
    remark: Annotated[str | None, Field(max_length=store.REMARK_MAX_CHARS),
                      AfterValidator(lambda v: v if v is None else storable(v))] = None
    index: int | None = Field(default=None, ge=1)
    add: bool = False
    secret: bool | None = None
    pools: list[Annotated[str, Field(pattern=POOL_PATTERN)]] | None = Field(
        default=None, min_length=1, max_length=64)


class PoolsIn(BaseModel):
    """A variable's new scope: pool names, or null for every pool."""

    model_config = ConfigDict(extra="forbid")
    pools: list[Annotated[str, Field(pattern=POOL_PATTERN)]] | None = Field(
        min_length=1, max_length=64)


class PoolsOut(BaseModel):
    """The scope stored: ``pools`` None means every pool."""

    name: str
    pools: list[str] | None


class ToggleIn(BaseModel):
    """Which value to enable or disable (None: all of them)."""

    model_config = ConfigDict(extra="forbid")
    index: int | None = Field(default=None, ge=1)


class ValueOut(BaseModel):
    """One value's public facts; never the value."""

    index: int
    remark: str
    enabled: bool
    updated_at: Any


class VariableOut(BaseModel):
    """A variable's public facts: ``pools`` None means every pool."""

    name: str
    pools: list[str] | None
    secret: bool
    updated_by: str | None
    updated_at: Any
    values: list[ValueOut]


class StoredOut(BaseModel):
    """The answer to a write."""

    name: str
    index: int | None
    changed: int | None = None


def _refusal(exc: Exception) -> ApiError:
    from qinglong.control.secrets.store import SecretsKeyMissingError

    if isinstance(exc, SecretsKeyMissingError):
        return ApiError(503, "secrets_key_missing", "secret values are sealed and this "
                        "replica has no keyring: start it with --secrets-keyring")
    if isinstance(exc, NotFoundError):
        return ApiError(404, "not_found", str(exc))
    return ApiError(422, "invalid_variable", str(exc).partition(": ")[2] or str(exc))


@router.get("/v1/vars", response_model=list[VariableOut])
def list_vars(request: Request, _who: Viewer) -> list[VariableOut]:
    """Every variable by name: scope, secret flag, each value's index, remark and flag."""
    with get_context(request).engine.connect() as conn:
        rows = store.list_variables(conn)
    return [VariableOut(**row) for row in rows]


EXPORT_TYPE = "text/plain; charset=utf-8"


@router.get("/v1/vars/export", response_class=PlainTextResponse, responses={
    200: {"content": {EXPORT_TYPE: {"schema": {"type": "string"}}},
          "description": "NAME=value lines, a `# remark` line before a value that has one"}})
def export_vars(request: Request, who: Viewer,
                include_secrets: Annotated[bool, Query()] = False) -> PlainTextResponse:
    """The enabled one-line values as ``NAME=value`` lines (viewer); secret variables'
    values too with ``include_secrets`` (admin only); see the module's description."""
    from qinglong.panel.var_lines import export_text

    if include_secrets and not who.allows("admin"):
        raise ApiError(403, "forbidden", "exporting secret values needs the admin scope")
    ctx = get_context(request)
    try:
        with ctx.engine.connect() as conn:
            rows = store.export_values(conn, secrets=include_secrets,
                                       keyring=ctx.extras.get("keyring"))
    except ValidationError as exc:
        raise _refusal(exc) from None
    if include_secrets:
        _log.warning("variables exported with secret values by token %r (%d values)",
                     who.name, sum(1 for r in rows if r["secret"]))
    text = export_text([(r["name"], r["value"], r["remark"]) for r in rows])
    return PlainTextResponse(text, media_type=EXPORT_TYPE, headers={
        "Cache-Control": "no-store",
        "Content-Disposition": 'attachment; filename="variables.env"'})


@router.post("/v1/vars/{name}", response_model=StoredOut)
def set_var(name: Name, body: ValueIn, request: Request, who: Operator) -> StoredOut:
    """Store a value (operator); see the module's description."""
    try:
        with get_context(request).engine.begin() as conn:
            stored = store.put_value(
                conn, name, body.value, who=who.name, remark=body.remark, index=body.index,
                add=body.add, secret=body.secret, pools=body.pools,
                set_pools="pools" in body.model_fields_set,
                keyring=get_context(request).extras.get("keyring"))
    except (NotFoundError, ValidationError) as exc:
        raise _refusal(exc) from None
    return StoredOut(name=name, index=stored.index, changed=int(stored.changed))


@router.post("/v1/vars/{name}/pools", response_model=PoolsOut)
def scope_var(name: Name, body: PoolsIn, request: Request, who: Operator) -> PoolsOut:
    """Set the variable's pool scope, values untouched (operator); null: every pool."""
    try:
        with get_context(request).engine.begin() as conn:
            pools = store.change_scope(conn, name, body.pools, who=who.name,
                                       keyring=get_context(request).extras.get("keyring"))
    except (NotFoundError, ValidationError) as exc:
        raise _refusal(exc) from None
    return PoolsOut(name=name, pools=pools)


def _toggle(name: str, body: ToggleIn, request: Request, who: Principal,
            enabled: bool) -> StoredOut:
    try:
        with get_context(request).engine.begin() as conn:
            changed = store.set_enabled(conn, name, body.index, enabled, who.name,
                                        keyring=get_context(request).extras.get("keyring"))
    except (NotFoundError, ValidationError) as exc:
        raise _refusal(exc) from None
    return StoredOut(name=name, index=body.index, changed=changed)


@router.post("/v1/vars/{name}/enable", response_model=StoredOut)
def enable_var(name: Name, body: ToggleIn, request: Request, who: Operator) -> StoredOut:
    """Enable value #index (operator; none: every value)."""
    return _toggle(name, body, request, who, True)


@router.post("/v1/vars/{name}/disable", response_model=StoredOut)
def disable_var(name: Name, body: ToggleIn, request: Request, who: Operator) -> StoredOut:
    """Disable value #index (operator; none: every value); the value is kept."""
    return _toggle(name, body, request, who, False)


@router.delete("/v1/vars/{name}", status_code=204, response_class=Response)
def remove_var(name: Name, request: Request, _who: Operator,
               index: Annotated[int | None, Query(ge=1)] = None) -> Response:
    """Remove the variable, or its value #index (operator)."""
    try:
        with get_context(request).engine.begin() as conn:
            store.remove(conn, name, index)
    except NotFoundError as exc:
        raise _refusal(exc) from None
    return Response(status_code=204)
