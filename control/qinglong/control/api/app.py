"""The composition of the HTTP API: ``build_app(ctx)`` (docs/protocols.md §4.5).

OpenAPI at ``/openapi.json``; errors in the JSON shape of ``errors.py``; every request body
but a bundle push's checked by the bounded JSON decoder (``json_body.py``); every router of
``qinglong.control.api``; the request-latency middleware on ``ctx.metrics`` (created when
the context has none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from qinglong.control.api import (
    health,
    logs,
    metrics,
    notify_routes,
    run_resolve,
    runs,
    scripts,
    tasks,
    token_routes,
    variables,
    worker_routes,
    workers,
)
from qinglong.control.api.errors import install_error_handlers
from qinglong.control.api.json_body import JsonBodyGuard
from qinglong.control.metrics import Metrics
from qinglong.shared.bundles import MAX_COMPRESSED_BYTES

if TYPE_CHECKING:

    from qinglong.control.api.context import ApiContext

API_VERSION = "1"


PANEL_UPLOAD_PATH = "/ui/bundles/upload"
PANEL_UPLOAD_BYTES = MAX_COMPRESSED_BYTES + 64 * 1024  # the tar plus the form's own parts


def build_app(ctx: ApiContext) -> FastAPI:
    """The API application over ``ctx`` (stored at ``app.state.ctx``)."""
    if ctx.metrics is None:
        ctx.metrics = Metrics()
    app = FastAPI(title="Qinglong 3 control API", version=API_VERSION,
                  openapi_url="/openapi.json", docs_url=None, redoc_url=None)
    app.state.ctx = ctx
    install_error_handlers(app)
    # run_resolve before runs: /v1/runs/resolve is not a /v1/runs/{run_id}; the worker
    # routes first: the busiest, matched before the others' patterns are tried
    for module in (worker_routes, health, metrics, tasks, run_resolve, runs, logs, scripts,
                   token_routes, variables, notify_routes, workers):
        app.include_router(module.router)
    _mount_panel(app, ctx)
    # every body but a bundle push's passes the bounded JSON decoder before any route; the
    # panel's bundle upload (a multipart form with the gzip tar) is bounded, not scanned
    app.add_middleware(JsonBodyGuard, raw_paths=frozenset({scripts.PUSH_PATH}),
                       form_paths={PANEL_UPLOAD_PATH: PANEL_UPLOAD_BYTES})
    app.add_middleware(metrics.LatencyMiddleware, metrics=ctx.metrics)
    return app


def _mount_panel(app: FastAPI, ctx: ApiContext) -> None:
    """The web panel at ``/ui`` (docs/panel.md "Cluster") when ``qinglong-panel`` is
    installed; without it the API serves alone (the panel is a separate distribution)."""
    try:
        import qinglong.panel.app  # noqa: F401
    except ImportError:
        return
    from qinglong.control.panel_backend import mount_panel

    mount_panel(app, ctx)
