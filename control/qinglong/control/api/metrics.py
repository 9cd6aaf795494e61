"""``GET /metrics`` (Prometheus text) and the request-latency middleware (docs/protocols.md §4.5).

The counters live in ``qinglong.control.metrics.Metrics`` (owned by ``ApiContext``); this
module only exposes them and times requests, labelling each by its route *template*
(``/v1/runs/{run_id}``; ``unmatched`` when no route matched), never the raw path, so the
label set stays bounded. ``/metrics`` needs no token, like the health probes: it holds
counts only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from qinglong.control.api.context import get_context
from qinglong.control.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from qinglong.control.metrics import Metrics

    Scope = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
    Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

router = APIRouter(tags=["health"])


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                             "description": "Prometheus text exposition"}})
def metrics(request: Request) -> Response:
    """The process's counters and the latency histogram."""
    registry = get_context(request).metrics
    assert registry is not None  # build_app sets it
    return Response(registry.exposition(), media_type=CONTENT_TYPE)


class LatencyMiddleware:
    """Pure ASGI middleware: times each HTTP request and records it in ``metrics`` under
    its method, route template and status."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}
        start = time.perf_counter()

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            self.metrics.observe_request(scope["method"], template, status["code"],
                                         time.perf_counter() - start)
