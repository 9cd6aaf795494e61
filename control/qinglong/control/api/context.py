"""What every route reaches through ``request.app.state.ctx``: one engine, the dispatch
timing, the log bucket and the metrics (docs/protocols.md §4.5). Built once by the composition root
(``ql3 control serve``, or a test), never per request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import Request
    from sqlalchemy import Engine

    from qinglong.control.metrics import Metrics


@dataclass
class ApiContext:
    """``engine``: the pooled SQLAlchemy engine (runtime role). ``lease_ms`` /
    ``heartbeat_ms``: the dispatch lease and heartbeat period handed out with each claim
    (heartbeat ≤ lease / 3, checked at start). ``s3`` a boto3 S3 client (or None when no
    bucket is configured: log endpoints answer 503), ``bucket`` its bucket, ``project_id``
    the project every task of this deployment belongs to. ``readiness``: a callable returning
    ``(ready: bool, reasons: list[str], degraded: list[str])`` for ``/readyz`` (None: ready when
    ``SELECT 1`` answers). ``metrics``: the process's counters (``qinglong.control.metrics``);
    ``build_app`` creates one when None. ``max_pushes``: bundle pushes this replica receives
    and checks at once (docs/operations.md "Push limits"); more answer 429.
    ``default_timezone``: ``serve --default-timezone``, the zone of a new task that names
    none (None: the caller's zone, else UTC)."""

    engine: Engine
    project_id: str
    lease_ms: int = 30_000
    heartbeat_ms: int = 10_000
    s3: Any = None
    bucket: str | None = None
    readiness: Any = None
    metrics: Metrics | None = None
    max_pushes: int = 2
    extras: dict[str, Any] = field(default_factory=dict)
    default_timezone: str | None = None
    #: ``serve --trusted-proxy``: the peers whose X-Forwarded-For/-Proto the panel at /ui
    #: believes (addresses or CIDR networks, checked at start; docs/panel.md "Cluster")
    panel_trusted_proxies: tuple[str, ...] = ()


def get_context(request: Request) -> ApiContext:
    ctx = request.app.state.ctx
    assert isinstance(ctx, ApiContext)
    return ctx
