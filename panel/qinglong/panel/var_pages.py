"""The Variables page (环境变量, docs/panel.md "Pages"): Qinglong's model of several values
per name, each with a remark and an enabled flag, and a secret flag per name whose values
are never shown again; import and export as ``NAME=value`` lines (secrets never exported).
A profile whose values are all write-only (the cluster: ``vars_reveal`` refuses) shows
every value masked, each variable's pool scope, and no export.

Every change needs a sign-in within the last 15 minutes (docs/panel.md "Security"); an older
session is sent to sign in again first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.paths import root
from qinglong.panel.security import Session
from qinglong.panel.task_pages import count_param, form_of, need

Render = Callable[..., Response]
Call = Callable[..., Awaitable[Any]]
MAX_IMPORT_LINES = 1000


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """The Variables page's routes."""

    async def listing(request: Request) -> Response:
        need(backend, "vars")
        try:
            found = await call(backend.vars_list)
            revealed = True
            for var in found:
                if not var["secret"] and revealed:
                    try:
                        shown = await call(backend.vars_reveal, var["name"])
                    except BackendRefusedError:  # a profile whose values are write-only
                        revealed = False
                        continue
                    var["values"] = shown["values"]
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        return render(request, "vars.html", 200, variables=found, revealed=revealed,
                      done=count_param(request, "done"), failed=count_param(request, "failed"),
                      problem=request.query_params.get("problem") == "1")

    def stale(request: Request) -> Response | None:
        session: Session = request.state.session
        if session.recent():
            return None
        return render(request, "reauth.html", 401, next=root(request) + "/vars")

    async def change(request: Request) -> Response:
        need(backend, "vars")
        refused = stale(request)
        if refused is not None:
            return refused
        data = await form_of(request)
        action = str(data.get("action", ""))
        name = str(data.get("name", "")).strip()
        index = _index(data.get("index"))
        try:
            if action == "add":
                await call(lambda: backend.vars_set(
                    name, str(data.get("value", "")), remark=str(data.get("remark", "")),
                    add=data.get("another") == "on", secret=data.get("secret") == "on"))
            elif action in ("enable", "disable"):
                await call(backend.vars_enable, name, index, action == "enable")
            elif action == "delete":
                await call(backend.vars_remove, name, index)
            else:
                return render(request, "error.html", 400, message_key="error.refused")
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:  # its message may name the value's limits, never it
            return RedirectResponse(root(request) + "/vars?problem=1", status_code=303)
        return RedirectResponse(root(request) + "/vars", status_code=303)

    async def import_lines(request: Request) -> Response:
        need(backend, "vars")
        refused = stale(request)
        if refused is not None:
            return refused
        data = await form_of(request)
        secret = data.get("secret") == "on"
        done = failed = 0
        lines = str(data.get("lines", "")).splitlines()[:MAX_IMPORT_LINES]
        for line in lines:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            name, sep, value = line.partition("=")
            name = name.strip().removeprefix("export ").strip()
            if not sep or not name:
                failed += 1
                continue
            try:
                await call(lambda n=name, v=value: backend.vars_set(
                    n, v, remark=None, add=True, secret=secret))
                done += 1
            except BackendUnavailableError:
                return render(request, "owner_down.html", 503)
            except BackendRefusedError:
                failed += 1
        query = urlencode({"done": done, "failed": failed})
        return RedirectResponse(f"{root(request)}/vars?{query}", status_code=303)

    async def export(request: Request) -> Response:
        need(backend, "vars")
        try:
            found = await call(backend.vars_list)
            plain = [await call(backend.vars_reveal, v["name"]) for v in found
                     if not v["secret"]]
        except BackendRefusedError:  # values are write-only in this profile: none leave
            plain = []
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)

        async def body() -> AsyncIterator[bytes]:
            for var in plain:
                for value in var["values"]:
                    if value["enabled"] and "\n" not in value["value"]:
                        yield f"{var['name']}={value['value']}\n".encode()

        return StreamingResponse(body(), media_type="text/plain; charset=utf-8", headers={
            "Content-Disposition": 'attachment; filename="variables.env"'})

    return [
        Route("/vars", listing),
        Route("/vars", change, methods=["POST"]),
        Route("/vars/import", import_lines, methods=["POST"]),
        Route("/vars/export.txt", export),
    ]


def _index(value: object) -> int | None:
    text = value if isinstance(value, str) else ""
    return int(text) if text.isdigit() and len(text) < 6 else None
