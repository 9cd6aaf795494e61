"""The local Scripts page (docs/panel.md "Scripts"): the data directory's scripts folder
listed, a file shown, edited in a plain textarea and saved with a conflict check, a new
file made. Every answer comes from the owner's ``scripts_*`` socket ops, which confine
paths to the folder.

A save sends back the version the editor was opened with (the SHA-256 of the content read);
the owner refuses it when the file changed since (``script_changed``), and the page shows
the editor again with the text that was typed, so nothing is lost. Opening the editor and
saving need a sign-in within the last 15 minutes (docs/panel.md "Security"); a stale save
also shows the typed text again, with the sign-in notice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.paths import root
from qinglong.panel.security import Session
from qinglong.panel.task_pages import form_of, need

Render = Callable[..., Response]
Call = Callable[..., Awaitable[Any]]


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """The Scripts page's routes (``/scripts``, ``/scripts/view``, ``/scripts/edit``,
    ``/scripts/new``, POST ``/scripts/save``); the file is named by the query or form
    field ``path``, relative to the folder."""

    def link(request: Request, page: str, path: str, **extra: str) -> str:
        return f"{root(request)}/scripts/{page}?{urlencode({'path': path, **extra})}"

    async def listing(request: Request) -> Response:
        need(backend, "scripts")
        try:
            folder = await call(backend.scripts_list)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        return render(request, "scripts.html", folder=folder,
                      links={f["path"]: link(request, "view", f["path"])
                             for f in folder["files"]})

    async def read(request: Request) -> tuple[dict[str, Any] | None, Response | None]:
        path = request.query_params.get("path", "")
        try:
            return await call(backend.script_read, path), None
        except BackendUnavailableError:
            return None, render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            status = 404 if exc.code == "not_found" else 400
            return None, render(request, "error.html", status, message_key=(
                "error.not_found" if status == 404 else "scripts.bad_path"))

    async def view(request: Request) -> Response:
        need(backend, "scripts")
        found, refused = await read(request)
        if found is None:
            assert refused is not None
            return refused
        return render(request, "script_view.html", script=found,
                      edit=link(request, "edit", found["path"]),
                      saved=request.query_params.get("saved") == "1")

    def stale(request: Request, next_url: str) -> Response | None:
        session: Session = request.state.session
        if session.recent():
            return None
        return render(request, "reauth.html", 401, next=next_url)

    async def edit(request: Request) -> Response:
        need(backend, "scripts")
        refused = stale(request, str(request.url.path) + "?" + str(request.url.query))
        if refused is not None:
            return refused
        found, refused = await read(request)
        if found is None:
            assert refused is not None
            return refused
        if found["content"] is None:
            return render(request, "error.html", 400, message_key="scripts.not_text")
        return editor(request, 200, file_path=found["path"], content=found["content"],
                      version=found["version"], crlf="\r\n" in found["content"], new=False)

    async def new(request: Request) -> Response:
        need(backend, "scripts")
        refused = stale(request, root(request) + "/scripts/new")
        if refused is not None:
            return refused
        return editor(request, 200, file_path="", content="", version="", crlf=False, new=True)

    def editor(request: Request, status: int, **ctx: Any) -> Response:
        return render(request, "script_edit.html", status, **{"problem": None, **ctx})

    async def save(request: Request) -> Response:
        need(backend, "scripts")
        data = await form_of(request)
        path = str(data.get("path", "")).strip()[:1000]
        version = str(data.get("version", ""))[:64]
        crlf = data.get("crlf") == "1"
        new_file = data.get("new") == "1"
        # browsers send a textarea's lines with CRLF: back to the file's own line ends
        # (not cut short: the panel reads a field of up to 8 MiB, the owner refuses more
        # than 128 KiB, and a refusal shows the whole text again)
        content = str(data.get("content", "")).replace("\r\n", "\n")
        if crlf:
            content = content.replace("\n", "\r\n")
        again = {"file_path": path, "content": content, "version": version, "crlf": crlf,
                 "new": new_file}
        session: Session = request.state.session
        if not session.recent():
            return editor(request, 401, problem="reauth.text", **again)
        try:
            await call(backend.script_write, path, content, version)
        except BackendUnavailableError:
            return editor(request, 503, problem="owner.down", **again)
        except BackendRefusedError as exc:
            if exc.code == "script_changed":
                return editor(request, 409, problem="scripts.changed", **again)
            if exc.code == "too_large" or "larger than" in exc.message:
                return editor(request, 413, problem="scripts.too_large", **again)
            return editor(request, 400, problem="scripts.refused", detail=exc.message,
                          **again)
        return RedirectResponse(link(request, "view", path, saved="1"), status_code=303)

    return [
        Route("/scripts", listing),
        Route("/scripts/view", view),
        Route("/scripts/edit", edit),
        Route("/scripts/new", new),
        Route("/scripts/save", save, methods=["POST"]),
    ]
