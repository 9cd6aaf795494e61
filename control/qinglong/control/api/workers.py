"""``GET /v1/workers``: the worker incarnations, for people (docs/protocols.md §4.2, §4.5;
issue 13 item 2).

One row per worker process start (an incarnation: a UUIDv7 of its own, never keyed by the
reusable name), newest first, keyset pages like every list (``cursor``: the last id seen,
``limit`` at most 200). Each carries its name, pool (by name), declared labels and
concurrency, when it registered (``started_at``), when control last heard from it
(``last_seen_at``: a claim poll or a heartbeat), when it reported its drain finished
(``stopped_at``), its ``state`` and the attempts it holds now (``attempts_held``: leases in
``claimed``, ``starting`` or ``running``).

``state``, by the database clock: ``stopped`` once it reported stopping; ``live`` when heard
from within one dispatch lease (``ApiContext.lease_ms``: a worker polls for work every few
seconds when idle and heartbeats each attempt well within a lease); ``silent`` otherwise (a
worker killed or cut off: its leases expire and are recovered, §4.2). ``?state=`` filters.

Viewer scope. Worker pools span the deployment (they are not per project), so every
incarnation is listed. Attempts held are counted over the partial index of live remote
leases (``attempts_lease_expiry_idx``), so the count reads live attempts only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel
from sqlalchemy import case, func, literal, select

from qinglong.control.api.context import get_context
from qinglong.control.api.models_common import ERRORS
from qinglong.control.api.security import require
from qinglong.control.auth.tokens import Principal
from qinglong.control.db.tables import attempts, worker_incarnations, worker_pools

router = APIRouter(tags=["workers"], responses=ERRORS)
Viewer = Annotated[Principal, Depends(require("viewer"))]
WorkerState = Literal["live", "silent", "stopped"]
LIVE_ATTEMPT = ("claimed", "starting", "running")


class WorkerOut(BaseModel):
    """One incarnation (see the module docstring for ``state`` and ``attempts_held``)."""

    id: str
    name: str
    pool: str
    labels: dict[str, str]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    state: WorkerState
    attempts_held: int


class WorkerPage(BaseModel):
    """Newest first; ``next_cursor``: the last id, to pass as ``cursor``."""

    items: list[WorkerOut]
    next_cursor: str | None


def _lease_s(request: Request) -> float:
    ctx = get_context(request)
    config = ctx.extras.get("dispatch")  # the DispatchConfig serve runs with, when given
    return float(getattr(config, "lease_ms", ctx.lease_ms)) / 1000


@router.get("/v1/workers", response_model=WorkerPage)
def get_workers(request: Request, _who: Viewer, state: WorkerState | None = None,
                cursor: UUID | None = None,
                limit: Annotated[int, Query(ge=1, le=200)] = 50) -> WorkerPage:
    """Worker incarnations newest first with their state and the attempts they hold now;
    keyset pages (``cursor``: the last id seen)."""
    w = worker_incarnations
    silent_after = func.make_interval(0, 0, 0, 0, 0, 0, literal(_lease_s(request)))
    state_of = case((w.c.stopped_at.is_not(None), "stopped"),
                    (w.c.last_seen_at > func.now() - silent_after, "live"),
                    else_="silent")
    query = (select(*w.c, worker_pools.c.name.label("pool"), state_of.label("state"))
             .join(worker_pools, worker_pools.c.id == w.c.pool_id))
    if state is not None:
        query = query.where(state_of == state)
    if cursor is not None:
        query = query.where(w.c.id < str(cursor))
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        rows = list(conn.execute(query.order_by(w.c.id.desc()).limit(limit)).mappings())
        held: dict[str, int] = {}
        if rows:
            held = {str(i): int(n) for i, n in conn.execute(
                select(attempts.c.worker_incarnation_id, func.count())
                .where(attempts.c.executor == "remote_worker",
                       attempts.c.status.in_(LIVE_ATTEMPT),
                       attempts.c.worker_incarnation_id.in_([r["id"] for r in rows]))
                .group_by(attempts.c.worker_incarnation_id))}
    items = [_worker_out(r, held.get(str(r["id"]), 0)) for r in rows]
    return WorkerPage(items=items, next_cursor=items[-1].id if len(items) == limit else None)


def _worker_out(row: Any, held: int) -> WorkerOut:
    fields = {f: row[f] for f in WorkerOut.model_fields if f not in ("id", "attempts_held")}
    return WorkerOut(id=str(row["id"]), attempts_held=held, **fields)
