"""A task's Occurrences page (docs/panel.md "Pages"): every schedule slot with its outcome —
a run (linked), skipped and why, joined a queued run, missed while nothing ran — as a
timeline, newest first, keyset paged. In every profile, open to every scope (a read).
Slot times are shown in the task's zone, as its schedule reads.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.forms import local_times
from qinglong.panel.paths import root

Render = Callable[..., Response]
Call = Callable[..., Awaitable[dict[str, Any]]]
OCCURRENCES_PAGE = 50
#: outcomes that created nothing, shown as skips (the rest: a run, or a queued run joined)
SKIPS = frozenset({"skipped_active", "backlog_full", "skipped_downtime", "skipped_disabled"})


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """``GET /tasks/{name}/occurrences`` (``?before=`` a cursor from the previous page)."""

    async def occurrences(request: Request) -> Response:
        name = request.path_params["name"]
        before = request.query_params.get("before") or None
        try:
            page = await call(backend.occurrences_page, name, before, OCCURRENCES_PAGE)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "not_found":
                return render(request, "error.html", 404, message_key="error.not_found")
            return render(request, "error.html", 400, message_key="error.refused")
        zone = str(page["task"].get("timezone") or "UTC")
        here = f"{root(request)}/tasks/{quote(name, safe='')}/occurrences"
        older = f"{here}?{urlencode({'before': page['next']})}" if page["next"] else None
        return render(request, "occurrences.html", 200, task=page["task"], zone=zone,
                      entries=[timeline_entry(e, zone) for e in page["items"]],
                      older=older, newest=here if before else None)

    return [Route("/tasks/{name}/occurrences", occurrences)]


def timeline_entry(item: dict[str, Any], zone: str) -> dict[str, Any]:
    """One occurrence as the template shows it: the backend's fields plus ``first``/``last``
    (wall-clock text in ``zone``, "" for none), ``kind`` (``run``, ``joined`` or ``skip``:
    the CSS class and the marker) and ``range`` (True for more than one slot)."""
    first, last = item.get("first_slot"), item.get("last_slot")
    shown = local_times([s for s in (first, last) if s], zone)
    first_text = shown[0] if first and shown else ""
    last_text = shown[-1] if last and shown else first_text
    outcome = str(item.get("outcome"))
    kind = "run" if outcome == "run_created" else "skip" if outcome in SKIPS else "joined"
    return {**item, "first": first_text, "last": last_text, "kind": kind,
            "range": int(item.get("slot_count") or 0) > 1 or (
                bool(last_text) and last_text != first_text)}
