"""``/livez`` and ``/readyz`` (docs/protocols.md §4.1, §4.5). No token needed: probes of an
orchestrator carry none, and neither answer holds anything secret.

``/livez``: 200 while the process serves HTTP. ``/readyz``: ``ctx.readiness()`` returns
``(ready, reasons, degraded)``; 200 when ready, else 503 with the named reasons
(``migration_pending``, ``runtime_role_invalid``, ``runtime_login_privileged``,
``database_unavailable``, ...). Degraded
capabilities (e.g. ``object_store_unsafe``) are listed and do not fail readiness. Without a
readiness callable, ready means the database answers ``SELECT 1``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text

from qinglong.control.api.context import get_context

if TYPE_CHECKING:
    from sqlalchemy import Engine

router = APIRouter(tags=["health"])
_log = logging.getLogger("qinglong.control.api.health")
ReadinessCheck = Callable[[], tuple[bool, list[str], list[str]]]


class Live(BaseModel):
    """``status`` is ``ok``."""

    status: str


class Ready(BaseModel):
    """``ready``; ``reasons``: named reasons when not ready; ``degraded``: capabilities
    that are degraded (``name: reason``) and do not fail readiness."""

    ready: bool
    reasons: list[str]
    degraded: list[str]


def schema_readiness_check(engine: Engine, runtime_role: str,
                           capabilities: Sequence[Any] = ()) -> ReadinessCheck:
    """``readiness.readiness`` (ledger, runtime grants, capability probes) over ``engine``,
    shaped for ``ApiContext.readiness``."""

    def check() -> tuple[bool, list[str], list[str]]:
        from qinglong.control.readiness import readiness

        verdict = readiness(engine, runtime_role=runtime_role, capabilities=capabilities)
        degraded = [f"{c.name}: {c.reason}" for c in verdict.degraded]
        return verdict.ready, [verdict.reason] if verdict.reason else [], degraded

    return check


@router.get("/livez", response_model=Live)
def livez() -> Live:
    """200 while the process serves HTTP."""
    return Live(status="ok")


@router.get("/readyz", response_model=Ready,
            responses={503: {"model": Ready, "description": "not ready: named reasons"}})
def readyz(request: Request) -> Any:
    """200 when ready (degraded capabilities listed), else 503 with named reasons."""
    ctx = get_context(request)
    try:
        if ctx.readiness is not None:
            ready, reasons, degraded = ctx.readiness()
        else:
            with ctx.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            ready, reasons, degraded = True, [], []
    except Exception as exc:  # the database is away: a reason, never a crash or a trace
        _log.warning("readiness check failed: %s", type(exc).__name__)
        ready, reasons, degraded = False, ["database_unavailable"], []
    body = Ready(ready=ready, reasons=list(reasons), degraded=list(degraded))
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
