"""The panel's Starlette application (docs/panel.md): pages, row actions and the live log.

``create_app(backend, sessions)`` works for any :class:`PanelBackend`; the local profile
serves it from ``ql3 local web`` (:mod:`qinglong.panel.local_web`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio.to_thread
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from qinglong.panel import i18n, password, task_pages, var_pages
from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError, PanelBackend
from qinglong.panel.security import (
    CSRF_FIELD,
    CSRF_HEADER,
    SECURITY_HEADERS,
    SESSION_COOKIE,
    Session,
    Sessions,
    csrf_ok,
    origin_ok,
)

PAGE_SIZE = 50
LOG_WAIT_S = 15.0  # one long poll; the stream sends a comment between polls
LOG_VIEWS = 200  # threads for open log views' long polls, apart from the pages' own pool


def create_app(backend: PanelBackend, sessions: Sessions,
               password_hash: str | None = None) -> Starlette:
    """The panel over ``backend``; ``sessions`` holds the one-time sign-in token;
    ``password_hash``: the stored password (:mod:`qinglong.panel.password`), None: only the
    one-time link signs in."""
    env = Environment(loader=PackageLoader("qinglong.panel", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        lang = request.state.lang
        messages = i18n.catalog(lang)
        session: Session | None = request.state.session
        html = env.get_template(name).render(
            t=messages, lang=lang, session=session, profile=backend.profile,
            csrf=session.csrf if session else "", path=request.url.path,
            password_enabled=password_hash is not None, **ctx)
        return HTMLResponse(html, status_code=status)

    class Guard(BaseHTTPMiddleware):
        async def dispatch(self, request: Request,
                           call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            request.state.lang = i18n.negotiate(request.cookies.get(i18n.COOKIE),
                                                request.headers.get("accept-language"))
            request.state.session = sessions.get(request.cookies.get(SESSION_COOKIE))
            path = request.url.path
            public = path.startswith(("/static/", "/signin", "/lang"))
            if not public and request.state.session is None:
                response: Response = render(request, "signin.html", 401, used=False,
                                            next=path)
            elif request.method not in ("GET", "HEAD") and not await _state_change_ok(request):
                response = render(request, "error.html", 403, message_key="error.csrf")
            else:
                response = await call_next(request)
            for key, value in SECURITY_HEADERS.items():
                response.headers[key] = value
            return response

    async def _state_change_ok(request: Request) -> bool:
        session: Session | None = request.state.session
        if session is None and request.url.path.startswith(("/lang", "/signin")):
            request.state.form = dict(await request.form())
            return origin_ok(request.headers.get("origin"), request.url.scheme,
                             request.headers.get("host"))
        if session is None:
            return False
        sent = request.headers.get(CSRF_HEADER)
        if sent is None:
            form = await request.form()
            request.state.form = dict(form)  # the body is read once: endpoints reuse it
            request.state.form_data = form  # with every value of a repeated field
            value = form.get(CSRF_FIELD)
            sent = value if isinstance(value, str) else None
        return csrf_ok(session, sent) and origin_ok(
            request.headers.get("origin"), request.url.scheme, request.headers.get("host"))

    async def call(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(lambda: fn(*args))

    log_limiter: list[anyio.CapacityLimiter] = []  # made in the event loop, on first use

    async def call_log_wait(*args: Any) -> dict[str, Any]:
        """``backend.log_wait`` on its own thread pool: each open log view holds a thread
        for up to LOG_WAIT_S, which must not starve the pages (anyio's default pool has 40)."""
        if not log_limiter:
            log_limiter.append(anyio.CapacityLimiter(LOG_VIEWS))
        return await anyio.to_thread.run_sync(lambda: backend.log_wait(*args),
                                              limiter=log_limiter[0])

    async def sign_in(request: Request) -> Response:
        if "token" not in request.query_params and password_hash is not None:
            return render(request, "signin.html", 200, used=False, wrong=False)
        session = sessions.redeem(request.query_params.get("token", ""))
        if session is None:
            request.state.session = None
            return render(request, "signin.html", 403, used=True)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(SESSION_COOKIE, session.id, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        return response

    async def sign_in_password(request: Request) -> Response:
        form = getattr(request.state, "form", None) or dict(await request.form())
        given = form.get("password", "")
        stored = password_hash
        ok = False
        if stored is not None and isinstance(given, str):  # scrypt off the event loop
            ok = bool((await call(lambda: {"ok": password.verify(stored, given)}))["ok"])
        if not ok:
            await asyncio.sleep(1.0)  # a guesser gets one try a second per connection
            return render(request, "signin.html", 403, used=False, wrong=True,
                          next=_back(request))
        session = sessions.renew(request.state.session)
        response = RedirectResponse(_back(request), status_code=303)
        response.set_cookie(SESSION_COOKIE, session.id, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        return response

    async def set_lang(request: Request) -> Response:
        form = getattr(request.state, "form", None) or {}
        lang = str(form.get("lang", ""))
        response = RedirectResponse(_back(request), status_code=303)
        if lang in i18n.LANGUAGES:
            response.set_cookie(i18n.COOKIE, lang, max_age=365 * 86400, httponly=True,
                                samesite="strict", path="/")
        return response

    async def tasks(request: Request) -> Response:
        query = request.query_params.get("q", "")[:200]
        try:
            offset = max(0, int(request.query_params.get("offset", "0")))
        except ValueError:
            offset = 0
        try:
            page = await call(backend.task_page, offset, PAGE_SIZE, query)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        partial = request.headers.get("hx-request") == "true"
        return render(request, "tasks_table.html" if partial else "tasks.html",
                      page=page, query=query, page_size=PAGE_SIZE,
                      done=task_pages.count_param(request, "done"),
                      failed=task_pages.count_param(request, "failed"))

    async def task_action(request: Request) -> Response:
        name = request.path_params["name"]
        action = request.path_params["action"]
        try:
            if action == "run":
                run = await call(backend.run_now, name)
                return RedirectResponse(f"/runs/{run['id']}", status_code=303)
            if action in ("enable", "disable"):
                await call(backend.set_enabled, name, action == "enable")
                return RedirectResponse(_back(request), status_code=303)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            return render(request, "error.html", 400 if exc.usage else 409,
                          message_key="error.refused")
        return render(request, "error.html", 404, message_key="error.not_found")

    async def run_detail(request: Request) -> Response:
        try:
            run = await call(backend.run_get, request.path_params["run"])
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError:
            return render(request, "error.html", 404, message_key="error.not_found")
        names = {key[len("status."):]: text for key, text in i18n.catalog(
            request.state.lang).items() if key.startswith("status.")}
        return render(request, "run.html", run=run, statuses_json=json.dumps(names))

    async def log_stream(request: Request) -> Response:
        run = request.path_params["run"]
        try:
            offset = max(0, int(request.headers.get("last-event-id")
                                or request.query_params.get("offset") or 0))
        except ValueError:
            offset = 0

        async def events() -> AsyncIterator[str]:
            nonlocal offset
            yield "retry: 2000\n\n"
            while not await request.is_disconnected():
                try:
                    chunk = await call_log_wait(run, offset, LOG_WAIT_S)
                except (BackendUnavailableError, BackendRefusedError):
                    yield "event: unavailable\ndata: {}\n\n"
                    return
                if chunk.get("gap"):  # raw bytes the log cap left out (protocols §3.8)
                    offset = int(chunk["offset"])
                    yield f"event: gap\nid: {offset}\ndata: {int(chunk['gap'])}\n\n"
                elif chunk["data"]:
                    offset = int(chunk["offset"])
                    text = chunk["data"].encode("utf-8", "surrogateescape").decode(
                        "utf-8", "replace")
                    yield f"id: {offset}\ndata: {json.dumps(text)}\n\n"
                else:
                    yield ": waiting\n\n"
                if chunk["done"] and not chunk["data"]:
                    yield f"event: end\ndata: {json.dumps(chunk['run_status'])}\n\n"
                    return

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    async def log_download(request: Request) -> Response:
        run = request.path_params["run"]

        async def body() -> AsyncIterator[bytes]:
            offset = 0
            while True:
                chunk = await call(backend.log_read, run, offset)
                data = chunk["data"].encode("utf-8", "surrogateescape")
                gap = int(chunk.get("gap") or 0)
                if gap:  # the notice `ql3 local logs` prints (docs/protocols.md §3.8)
                    yield f"[ql3: {gap} bytes of output left out here by the log cap]\n".encode()
                if data:
                    yield data
                offset = int(chunk["offset"])
                if not data and not gap:
                    return

        try:
            await call(backend.run_get, run)
        except (BackendUnavailableError, BackendRefusedError):
            return PlainTextResponse("not available", status_code=404)
        return StreamingResponse(body(), media_type="text/plain; charset=utf-8", headers={
            "Content-Disposition": 'attachment; filename="run.log"'})

    static = StaticFiles(packages=[("qinglong.panel", "static")])
    return Starlette(routes=[
        Route("/", tasks),
        Route("/signin", sign_in),
        Route("/signin", sign_in_password, methods=["POST"]),
        *var_pages.routes(render, call, backend),
        Route("/lang", set_lang, methods=["POST"]),
        *task_pages.routes(render, call, backend),
        Route("/tasks/{name:path}/{action}", task_action, methods=["POST"]),
        Route("/runs/{run}", run_detail),
        Route("/runs/{run}/log/stream", log_stream),
        Route("/runs/{run}/log.txt", log_download),
        Mount("/static", static, name="static"),
    ], middleware=[Middleware(Guard)])


def _back(request: Request) -> str:
    """Where to go after a form: the same-origin page named by ``next`` (a path), else /."""
    target = request.query_params.get("next", "/")
    safe = target.startswith("/") and not target.startswith(("//", "/\\"))
    return target if safe and "\\" not in target else "/"
