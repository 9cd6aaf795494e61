"""The worker reads behind ``GET /v1/workers`` and the panel's Workers page (docs/panel.md
"Pages"; docs/protocols.md §4.2 worker pools, §4.5): incarnations with their state by the
database's clock, the attempts they hold, the pools, and the live tasks no live worker may
run. One set of queries for both, so the page and the API never disagree.

``state``: ``stopped`` once an incarnation reported stopping; ``live`` when heard from
within one dispatch lease (:func:`lease_s_of`); ``silent`` otherwise. A task may run on a
live incarnation whose labels, and whose pool's labels, hold the task's labels (the claim's
rule, ``dispatch/queries.sql`` ``pick_runs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, case, exists, func, literal, select

from qinglong.control.db.tables import attempts, tasks, worker_incarnations, worker_pools

if TYPE_CHECKING:
    from sqlalchemy import ColumnElement, Connection, RowMapping

    from qinglong.control.api.context import ApiContext

LIVE_ATTEMPT = ("claimed", "starting", "running")


def lease_s_of(ctx: ApiContext) -> float:
    """Seconds of one dispatch lease: the DispatchConfig serve runs with (``extras
    ["dispatch"]``), else the context's ``lease_ms``."""
    config = ctx.extras.get("dispatch")
    return float(getattr(config, "lease_ms", ctx.lease_ms)) / 1000


def _silent_after(lease_s: float) -> Any:
    return func.make_interval(0, 0, 0, 0, 0, 0, literal(lease_s))


def state_of(lease_s: float) -> ColumnElement[str]:
    """The ``state`` of a ``worker_incarnations`` row, by the database's clock."""
    w = worker_incarnations
    return case((w.c.stopped_at.is_not(None), "stopped"),
                (w.c.last_seen_at > func.now() - _silent_after(lease_s), "live"),
                else_="silent")


def incarnations(conn: Connection, *, lease_s: float, states: tuple[str, ...] | None,
                 cursor: str | None, limit: int) -> list[RowMapping]:
    """At most ``limit`` incarnations newest first (id below ``cursor`` when given) in one of
    ``states`` (None: any): every column, plus ``pool`` (its name), ``state`` and
    ``seen_s`` (seconds since ``last_seen_at`` by the database's clock, a float)."""
    w = worker_incarnations
    state = state_of(lease_s)
    seen_s = func.extract("epoch", func.now() - w.c.last_seen_at)
    query = (select(*w.c, worker_pools.c.name.label("pool"), state.label("state"),
                    seen_s.label("seen_s"))
             .join(worker_pools, worker_pools.c.id == w.c.pool_id))
    if states is not None:
        query = query.where(state.in_(states))
    if cursor is not None:
        query = query.where(w.c.id < cursor)
    return list(conn.execute(query.order_by(w.c.id.desc()).limit(limit)).mappings())


def attempts_held(conn: Connection, ids: list[Any]) -> dict[str, int]:
    """Attempts each incarnation of ``ids`` holds now (``claimed``, ``starting``,
    ``running``), read over the partial index of live remote leases; absent: none."""
    if not ids:
        return {}
    return {str(i): int(n) for i, n in conn.execute(
        select(attempts.c.worker_incarnation_id, func.count())
        .where(attempts.c.executor == "remote_worker",
               attempts.c.status.in_(LIVE_ATTEMPT),
               attempts.c.worker_incarnation_id.in_(ids))
        .group_by(attempts.c.worker_incarnation_id))}


def pools(conn: Connection, *, lease_s: float) -> list[RowMapping]:
    """Every pool by name: ``name``, ``labels`` and ``live`` (its live incarnations)."""
    w = worker_incarnations
    live = (select(func.count()).select_from(w)
            .where(w.c.pool_id == worker_pools.c.id, w.c.stopped_at.is_(None),
                   w.c.last_seen_at > func.now() - _silent_after(lease_s))
            .scalar_subquery())
    return list(conn.execute(select(worker_pools.c.name, worker_pools.c.labels,
                                    live.label("live"))
                             .order_by(worker_pools.c.name)).mappings())


def no_live_worker(lease_s: float) -> ColumnElement[bool]:
    """True for a ``tasks`` row no live incarnation may run (its labels are not within any
    live incarnation's labels and its pool's)."""
    w = worker_incarnations
    return ~exists(select(1).select_from(w.join(worker_pools, worker_pools.c.id == w.c.pool_id))
                   .where(w.c.stopped_at.is_(None),
                          w.c.last_seen_at > func.now() - _silent_after(lease_s),
                          tasks.c.labels.contained_by(w.c.labels),
                          tasks.c.labels.contained_by(worker_pools.c.labels)))


def unmatched_tasks(conn: Connection, project_id: str, *, lease_s: float,
                    limit: int) -> tuple[list[RowMapping], int]:
    """The live tasks of ``project_id`` no live worker may run: at most ``limit`` of them by
    name (``name``, ``labels``), and how many there are."""
    where = and_(tasks.c.project_id == project_id, tasks.c.deleted_at.is_(None),
                 no_live_worker(lease_s))
    total = conn.execute(select(func.count()).select_from(tasks).where(where)).scalar_one()
    rows = list(conn.execute(select(tasks.c.name, tasks.c.labels).where(where)
                             .order_by(tasks.c.name).limit(limit)).mappings())
    return rows, int(total)
