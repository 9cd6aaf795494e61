"""The Workers page (docs/panel.md "Pages"; a profile with workers: the cluster): pools,
the incarnations not stopped (labels, concurrency, attempts held, last heartbeat as
"N s ago" by the database's clock and as a time the browser shows in the viewer's zone),
and the tasks whose labels no live worker holds. A read, open to every scope.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from qinglong.panel import i18n
from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.paths import root
from qinglong.panel.task_pages import need

Render = Callable[..., Response]
Call = Callable[..., Awaitable[dict[str, Any]]]
WORKERS_PAGE = 100


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """``GET /workers`` (``?before=`` a cursor from the previous page)."""

    async def workers(request: Request) -> Response:
        need(backend, "workers")
        before = request.query_params.get("before") or None
        try:
            page = await call(backend.workers_page, before, WORKERS_PAGE)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:  # a cursor not made by us
            page = await call(backend.workers_page, None, WORKERS_PAGE)
            before = None
        messages = i18n.catalog(request.state.lang)
        shown = [{**w, "ago": ago(w.get("seen_s"), messages),
                  "seen_utc": utc_text(w.get("last_seen_at"))} for w in page["workers"]]
        here = f"{root(request)}/workers"
        older = f"{here}?{urlencode({'before': page['next']})}" if page["next"] else None
        return render(request, "workers.html", 200, page=page, workers=shown, older=older,
                      newest=here if before else None)

    return [Route("/workers", workers)]


def ago(seconds: object, messages: dict[str, str]) -> str:
    """``seconds`` (a number >= 0; None: "") as "12 s ago" / "12 秒前" in the catalog
    ``messages``: seconds below a minute, then minutes, hours, days (whole, rounded down)."""
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return ""
    whole = max(0, int(seconds))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if whole >= size:
            return messages[f"ago.{unit}"].format(n=whole // size)
    return messages["ago.s"].format(n=whole)


def utc_text(value: object) -> str:
    """An ISO instant as ``YYYY-MM-DD HH:MM:SS UTC`` (what the page shows before its script
    puts the time in the viewer's zone); "" for none."""
    if not isinstance(value, str) or not value:
        return ""
    at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if at.utcoffset() is None:
        return value
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
