"""Lease writes after a claim: started and heartbeat (docs/protocols.md §4.2, fencing).

Each is a compare-and-set on (attempt id, lease token, lease version), a live status, a lease
not yet expired by the database clock and the caller's pool; a miss raises LeaseLostError
(409 ``lease_lost``: the worker kills that attempt's group). The (token, version) pair never
changes here — only a claim makes a new one — so a write whose response was lost can be sent
again: a replayed ``started`` answers ``Ack(replayed=True)``, never 409.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import LeaseLostError
from qinglong.control.dispatch.statements import sql
from qinglong.shared.ids import uuid7
from qinglong.shared.wire import Ack, HeartbeatAnswer, HeartbeatReport, LeaseRef, StartedReport

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.engine import RowMapping

    from qinglong.control.db.engine import Transactions

_COMPLETED = ("succeeded", "failed", "timed_out", "cancelled")


def lease_params(pool_id: str, lease: LeaseRef, **extra: Any) -> dict[str, Any]:
    """The fence of every lease statement: the triple plus the caller's pool."""
    return {"attempt_id": lease.attempt_id, "lease_token": lease.lease_token,
            "lease_version": lease.lease_version, "pool_id": pool_id, **extra}


def lease_state(conn: Connection, pool_id: str, lease: LeaseRef) -> RowMapping | None:
    """The attempt behind ``lease`` if it is (or was) leased to an incarnation of
    ``pool_id`` under exactly this (token, version), else None. Columns: see
    ``lease_state`` in queries.sql (status, started, live, completion, run and task facts)."""
    return run_named(conn, sql("lease_state"), lease_params(pool_id, lease)).mappings().first()


def require_live_lease(conn: Connection, pool_id: str, lease: LeaseRef) -> RowMapping:
    """``lease_state`` of a live lease (live status, not expired by ``now()``); LeaseLostError
    otherwise. A read only: the writes re-check the same fence."""
    state = lease_state(conn, pool_id, lease)
    if state is None or state["status"] not in ("claimed", "starting", "running") \
            or not state["live"]:
        raise LeaseLostError("the lease is not live")
    return state


def report_started(engine: Transactions, config: DispatchConfig, *, pool_id: str,
                   report: StartedReport) -> Ack:
    """The attempt's process group runs: attempt claimed -> running (``started_at``), the
    lease renewed by ``config.lease_ms``, run dispatching -> running, both events, one
    transaction. A replay after it was applied (same lease; running and live, or completed
    by this same lease) answers ``Ack(replayed=True)``. LeaseLostError otherwise."""
    with engine.begin() as conn:
        applied = run_named(conn, sql("started"), lease_params(
            pool_id, report.lease, lease_s=config.lease_ms / 1000.0,
            attempt_event_id=uuid7(), run_event_id=uuid7())).first()
        if applied is not None:
            return Ack()
        state = lease_state(conn, pool_id, report.lease)
    if state is not None and state["started"] and (
            (state["status"] == "running" and state["live"])
            or state["status"] in _COMPLETED):
        return Ack(replayed=True)
    raise LeaseLostError("the lease is not live")


def heartbeat(engine: Transactions, config: DispatchConfig, *, pool_id: str,
              report: HeartbeatReport) -> HeartbeatAnswer:
    """Renew a live lease: ``lease_expires_at = now() + config.lease_ms`` (database clock),
    the incarnation's ``last_seen_at`` moves; the answer's ``cancel`` is true once a cancel
    was requested for the run. Idempotent; LeaseLostError when the lease is not live."""
    with engine.begin() as conn:
        row = run_named(conn, sql("heartbeat"), lease_params(
            pool_id, report.lease, lease_s=config.lease_ms / 1000.0)).first()
    if row is None:
        raise LeaseLostError("the lease is not live")
    return HeartbeatAnswer(cancel=bool(row[0]), lease_ms=config.lease_ms)
