"""Pinned tasks and saved views of the Tasks page (docs/panel.md "Pinned tasks and saved
views"), for a backend whose ``features`` hold :data:`~qinglong.panel.backend.VIEWS`.

A row's **pin**/**unpin** (``POST /tasks/NAME/pin``, ``/unpin``) puts the task first on the
page; a saved view is a named search (the search box's text) and sort (``?sort=``, one of
:data:`~qinglong.panel.backend.SORTS`): **save** (``POST /views/save``: name, q, sort;
replaces one of the same name), **apply** (a link to ``/?q=…&sort=…``), **delete**
(``POST /views/delete``: name). The writes need a session that may write (the guard's
``can_write``, as the other row actions); every scope lists and applies views.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from qinglong.panel.backend import (
    SORTS,
    VIEWS,
    BackendRefusedError,
    BackendUnavailableError,
    NotInProfileError,
    PanelBackend,
    ViewsBackend,
)
from qinglong.panel.paths import back, root
from qinglong.panel.task_pages import form_of

Render = Callable[..., Response]
Call = Callable[..., Awaitable[Any]]


def sort_of(request: Request) -> str:
    """The page's sort (query parameter ``sort``), "name" when absent or unknown."""
    sort = request.query_params.get("sort", "name")
    return sort if sort in SORTS else "name"


async def tasks_and_views(call: Call, backend: PanelBackend, offset: int, limit: int,
                          query: str, sort: str) -> tuple[dict[str, Any], list[Any] | None]:
    """The Tasks page's page of tasks and the user's saved views (None: the backend has no
    :data:`VIEWS`, and the page is as before: by name, no pins, no views)."""
    if VIEWS not in backend.features:
        return await call(backend.task_page, offset, limit, query), None
    views = cast(ViewsBackend, backend)
    return (await call(views.task_page, offset, limit, query, sort),
            await call(views.views_list))


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """The routes, placed before the Tasks page's ``/tasks/{name}/{action}``."""
    views = cast(ViewsBackend, backend)

    async def act(request: Request, fn: Callable[..., Any], *args: Any,
                  target: str) -> Response:
        if VIEWS not in backend.features:
            raise NotInProfileError(VIEWS)
        try:
            await call(fn, *args)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "forbidden":
                return render(request, "error.html", 403, message_key="error.read_only")
            if exc.code == "not_found":
                return render(request, "error.html", 404, message_key="error.not_found")
            return render(request, "error.html", 400, message_key="views.refused")
        return RedirectResponse(target, status_code=303)

    async def form(request: Request, key: str) -> str:
        value = (await form_of(request)).get(key, "")
        return value if isinstance(value, str) else ""

    async def pin(request: Request) -> Response:
        return await act(request, views.task_pin, request.path_params["name"],
                         not request.url.path.endswith("/unpin"), target=back(request))

    async def save(request: Request) -> Response:
        query, sort = (await form(request, "q"))[:200], await form(request, "sort")
        target = f"{root(request)}/?" + urlencode({"q": query, "sort": sort})
        return await act(request, views.views_save, await form(request, "name"), query,
                         sort, target=target)

    async def delete(request: Request) -> Response:
        return await act(request, views.views_remove, await form(request, "name"),
                         target=back(request))

    return [
        Route("/tasks/{name:path}/pin", pin, methods=["POST"]),
        Route("/tasks/{name:path}/unpin", pin, methods=["POST"]),
        Route("/views/save", save, methods=["POST"]),
        Route("/views/delete", delete, methods=["POST"]),
    ]
