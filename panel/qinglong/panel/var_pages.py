"""The Variables page (环境变量, docs/panel.md "Pages"): Qinglong's model of several values
per name, each with a remark and an enabled flag, and a secret flag per name whose values
are never shown again; import and export as ``NAME=value`` lines (secrets never exported).
A profile whose values are all write-only (the cluster: ``vars_reveal`` refuses) shows
every value masked and each variable's pool scope; with ``var_export`` in the backend's
features it still exports the plain variables' values, and an admin who confirms on a page
of its own (a recent sign-in, a CSRF-checked POST) exports the secret ones' too. With
``var_pools`` the add form takes a pool scope (names split by commas or spaces; empty: a
new variable reaches every pool, an existing one keeps its scope) and a scoped variable's
row has a button that widens it back to every pool.

Every change needs a sign-in within the last 15 minutes (docs/panel.md "Security"); an older
session is sent to sign in again first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from qinglong.panel.backend import (
    VAR_EXPORT,
    VAR_POOLS,
    BackendRefusedError,
    BackendUnavailableError,
    PanelBackend,
    VarExportBackend,
    VarPoolsBackend,
)
from qinglong.panel.paths import root
from qinglong.panel.security import Session
from qinglong.panel.task_pages import count_param, form_of, need
from qinglong.panel.var_lines import export_line, export_text, parse_lines
from qinglong.shared.errors import ValidationError
from qinglong.shared.variable_limits import (
    NAME_MAX_CHARS,
    VARIABLE_MAX_BYTES,
    check_variable_name,
    entry_bytes,
    reserved_name_problem,
)

Render = Callable[..., Response]
Call = Callable[..., Awaitable[Any]]
MAX_IMPORT_LINES = 1000


def routes(render: Render, call: Call, backend: PanelBackend) -> list[Route]:
    """The Variables page's routes."""

    async def page(request: Request, status: int = 200, **extra: Any) -> Response:
        """The page; ``extra`` (a refused add: ``refusal`` key and params, ``form`` as
        typed) is passed to the template."""
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
        return render(request, "vars.html", status, variables=found, revealed=revealed,
                      done=count_param(request, "done"), failed=count_param(request, "failed"),
                      same=count_param(request, "same"),
                      problem=request.query_params.get("problem") == "1",
                      pools_problem=request.query_params.get("problem") == "pools",
                      pools_field=VAR_POOLS in backend.features,
                      export_field=VAR_EXPORT in backend.features,
                      admin=request.state.session.scope == "admin",
                      name_max=NAME_MAX_CHARS, **extra)

    async def secret_names() -> set[str]:
        """Names of the secret variables: an unticked 机密 box (add or import) adds to one
        without making it plain (only ``vars set --plain`` does)."""
        return {v["name"] for v in await call(backend.vars_list) if v["secret"]}

    async def listing(request: Request) -> Response:
        need(backend, "vars")
        return await page(request)

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
        value, remark = str(data.get("value", "")), str(data.get("remark", ""))
        secret, another = data.get("secret") == "on", data.get("another") == "on"
        typed: dict[str, Any] = {"name": name, "value": value, "remark": remark,
                                 "secret": secret, "another": another,
                                 "pools": str(data.get("pools", ""))}
        try:
            if action == "add":
                refusal = add_problem(typed)
                if refusal is not None:
                    return await page(request, 400, refusal=refusal, form=typed)
                keep = secret or name in await secret_names()  # never made plain here
                pools = str(data.get("pools", "")).replace(",", " ").split()
                if pools and VAR_POOLS in backend.features:
                    scoped = cast(VarPoolsBackend, backend)
                    await call(lambda: scoped.vars_set(
                        name, value, remark=remark, add=another, secret=keep, pools=pools))
                else:
                    await call(lambda: backend.vars_set(
                        name, value, remark=remark, add=another, secret=keep))
            elif action == "all_pools" and VAR_POOLS in backend.features:
                scoped = cast(VarPoolsBackend, backend)
                await call(scoped.vars_pools, name, None)
            elif action in ("enable", "disable"):
                await call(backend.vars_enable, name, index, action == "enable")
            elif action == "delete":
                await call(backend.vars_remove, name, index)
            else:
                return render(request, "error.html", 400, message_key="error.refused")
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:  # its message names a limit, never the value
            if exc.code == "invalid_pool":
                return RedirectResponse(root(request) + "/vars?problem=pools", status_code=303)
            if action != "add":
                return RedirectResponse(root(request) + "/vars?problem=1", status_code=303)
            return await page(request, 400, form=typed,
                              refusal=("vars.problem.owner", {"reason": exc.message}))
        return RedirectResponse(root(request) + "/vars", status_code=303)

    async def import_lines(request: Request) -> Response:
        need(backend, "vars")
        refused = stale(request)
        if refused is not None:
            return refused
        data = await form_of(request)
        secret = data.get("secret") == "on"
        done = same = failed = 0
        lines = str(data.get("lines", "")).splitlines()[:MAX_IMPORT_LINES]
        try:
            hidden = set() if secret else await secret_names()
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        for name, value, remark in parse_lines(lines):
            if value is None:
                failed += 1
                continue
            try:
                answer = await call(lambda n=name, v=value, r=remark: backend.vars_set(
                    n, v, remark=r, add=True, secret=secret or n in hidden))
            except BackendUnavailableError:
                return render(request, "owner_down.html", 503)
            except BackendRefusedError:
                failed += 1
                continue
            if answer.get("changed", True):
                done += 1
            else:
                same += 1
        query = urlencode({"done": done, "same": same, "failed": failed})
        return RedirectResponse(f"{root(request)}/vars?{query}", status_code=303)

    def download(text: str) -> Response:
        return Response(text.encode(), media_type="text/plain; charset=utf-8", headers={
            "Content-Disposition": 'attachment; filename="variables.env"'})

    async def exported(request: Request, secrets: bool) -> Response:
        """The export of a :data:`VAR_EXPORT` backend (plain values; ``secrets``: the
        secret ones' too, which the backend allows an admin only)."""
        exporter = cast(VarExportBackend, backend)
        try:
            rows = await call(exporter.vars_export, secrets)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            if exc.code == "forbidden":
                return render(request, "error.html", 403, message_key="vars.export_admin_only")
            return render(request, "error.html", 503, message_key="vars.export_keyring")
        return download(export_text([(r["name"], r["value"], r.get("remark") or "")
                                     for r in rows]))

    async def export_secrets(request: Request) -> Response:
        """GET: the confirmation page (admin sessions only, else 403); POST (CSRF-checked
        by the app, a recent sign-in, ``confirm=yes``): the export with secret values."""
        need(backend, "vars")
        need(backend, VAR_EXPORT)
        session: Session = request.state.session
        if session.scope != "admin":
            return render(request, "error.html", 403, message_key="vars.export_admin_only")
        if request.method != "POST":
            return render(request, "vars_export_confirm.html")
        refused = stale(request)
        if refused is not None:
            return refused
        data = await form_of(request)
        if data.get("confirm") != "yes":
            return render(request, "vars_export_confirm.html", 400)
        return await exported(request, True)

    async def export(request: Request) -> Response:
        need(backend, "vars")
        if VAR_EXPORT in backend.features:
            return await exported(request, False)
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
                        yield export_line(var["name"], value["value"],
                                          value.get("remark") or "").encode()

        return StreamingResponse(body(), media_type="text/plain; charset=utf-8", headers={
            "Content-Disposition": 'attachment; filename="variables.env"'})

    return [
        Route("/vars", listing),
        Route("/vars", change, methods=["POST"]),
        Route("/vars/import", import_lines, methods=["POST"]),
        Route("/vars/export.txt", export),
        Route("/vars/export-secrets", export_secrets, methods=["GET", "POST"]),
    ]


def add_problem(typed: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """Why the owner would refuse the add form ``typed`` (``name``, ``value``, ``remark``),
    as ``(catalog key, params)``, or None; the rules of both profiles' setters
    (``shared/variable_limits.py``, remark: at most 200 characters on one line). Checked
    here so the refusal is worded in the page's language; never echoes a value."""
    name, value, remark = typed["name"], typed["value"], typed["remark"]
    try:
        check_variable_name(name)
    except ValidationError:
        return "vars.problem.name", {"max": NAME_MAX_CHARS}
    if reserved_name_problem(name) is not None:
        return "vars.problem.reserved", {"name": name}
    if len(remark) > 200 or not remark.isprintable():
        return "vars.problem.remark", {"max": 200}
    if not value:  # both profiles' `vars set` refuse an empty value; the local owner too
        return "vars.problem.empty", {}
    if "\x00" in value:
        return "vars.problem.nul", {}
    if entry_bytes(name, value) > VARIABLE_MAX_BYTES:
        return "vars.problem.too_big", {"max": VARIABLE_MAX_BYTES // 1024}
    return None


def _index(value: object) -> int | None:
    text = value if isinstance(value, str) else ""
    return int(text) if text.isdigit() and len(text) < 6 else None
