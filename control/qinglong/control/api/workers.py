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

from qinglong.control.api import worker_listing as listing
from qinglong.control.api.context import get_context
from qinglong.control.api.models_common import ERRORS
from qinglong.control.api.security import require
from qinglong.control.auth.tokens import Principal

router = APIRouter(tags=["workers"], responses=ERRORS)
Viewer = Annotated[Principal, Depends(require("viewer"))]
WorkerState = Literal["live", "silent", "stopped"]


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


@router.get("/v1/workers", response_model=WorkerPage)
def get_workers(request: Request, _who: Viewer, state: WorkerState | None = None,
                cursor: UUID | None = None,
                limit: Annotated[int, Query(ge=1, le=200)] = 50) -> WorkerPage:
    """Worker incarnations newest first with their state and the attempts they hold now;
    keyset pages (``cursor``: the last id seen). The queries are ``api/worker_listing.py``'s,
    shared with the panel's Workers page."""
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        rows = listing.incarnations(conn, lease_s=listing.lease_s_of(ctx),
                                    states=None if state is None else (state,),
                                    cursor=None if cursor is None else str(cursor),
                                    limit=limit)
        held = listing.attempts_held(conn, [r["id"] for r in rows])
    items = [_worker_out(r, held.get(str(r["id"]), 0)) for r in rows]
    return WorkerPage(items=items, next_cursor=items[-1].id if len(items) == limit else None)


def _worker_out(row: Any, held: int) -> WorkerOut:
    fields = {f: row[f] for f in WorkerOut.model_fields if f not in ("id", "attempts_held")}
    return WorkerOut(id=str(row["id"]), attempts_held=held, **fields)
