"""Worker incarnations (docs/protocols.md §4.2, worker pools; case C12).

Every worker process start registers a new incarnation: a fresh UUIDv7, its pool taken from
the token (never from the request), its declared labels bounded by the pool's. Nothing is
keyed by the worker's reusable name, so a worker restarted under the same name is a new owner
and never inherits the old incarnation's leases (they expire and are recovered).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import LabelsOutsidePoolError, UnknownIncarnationError
from qinglong.control.dispatch.statements import sql
from qinglong.shared.ids import uuid7
from qinglong.shared.wire import WorkerRegistered, WorkerRegistration

if TYPE_CHECKING:
    from qinglong.control.db.engine import Transactions


def labels_within(declared: Mapping[str, str], allowed: Mapping[str, str]) -> bool:
    """True when every ``key=value`` of ``declared`` is also in ``allowed`` (jsonb ``<@``)."""
    return all(allowed.get(key) == value for key, value in declared.items())


def register_incarnation(engine: Transactions, config: DispatchConfig, *, pool_id: str,
                         pool_labels: Mapping[str, str],
                         registration: WorkerRegistration) -> WorkerRegistered:
    """Record a new incarnation of pool ``pool_id`` and answer its id with the lease timing.

    ``registration.labels`` must be within ``pool_labels`` (the token's pool, read at
    authentication), else LabelsOutsidePoolError (403 ``labels_outside_pool``) and nothing is
    written. One short transaction. docs/protocols.md §4.2 (worker pools).
    """
    if not labels_within(registration.labels, pool_labels):
        raise LabelsOutsidePoolError("declared labels are not within the pool's labels")
    incarnation_id = uuid7()
    with engine.begin() as conn:
        run_named(conn, sql("register_incarnation"), {
            "id": incarnation_id, "pool_id": pool_id, "name": registration.name,
            "labels": json.dumps(registration.labels, sort_keys=True),
            "concurrency": registration.concurrency})
    return WorkerRegistered(incarnation_id, config.lease_ms, config.heartbeat_ms)


def stop_incarnation(engine: Transactions, *, pool_id: str, incarnation_id: str) -> None:
    """Mark the incarnation stopped (drain finished); idempotent. UnknownIncarnationError
    when it is not an incarnation of ``pool_id``. Its leases are not touched: an attempt it
    still holds ends by completion or by lease recovery."""
    with engine.begin() as conn:
        row = run_named(conn, sql("stop_incarnation"),
                        {"id": incarnation_id, "pool_id": pool_id}).first()
    if row is None:
        raise UnknownIncarnationError("no such incarnation in this pool")
