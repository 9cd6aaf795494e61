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
from starlette.formparsers import MultiPartException
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

from qinglong.panel import (
    bundle_pages,
    cluster_task_pages,
    i18n,
    occurrence_pages,
    password,
    paths,
    run_facts,
    script_pages,
    settings_pages,
    task_pages,
    times,
    var_pages,
    view_pages,
    worker_pages,
)
from qinglong.panel.backend import (
    BackendRefusedError,
    BackendUnavailableError,
    NotInProfileError,
    PanelBackend,
)
from qinglong.panel.proxies import Network, TrustedProxies
from qinglong.panel.security import (
    CSRF_FIELD,
    CSRF_HEADER,
    SECURITY_HEADERS,
    SESSION_COOKIE,
    Session,
    Sessions,
    SignInRefusedError,
    SignInThrottledError,
    csrf_ok,
    current_session,
    origin_ok,
)

PAGE_SIZE = 50
LOG_WAIT_S = 15.0  # one long poll; the stream sends a comment between polls
RUN_POLL_S = 1.0  # a poll while the run is queued or dispatching (its start shows soon)
LOG_VIEWS = 200  # threads for open log views' long polls, apart from the pages' own pool


def create_app(backend: PanelBackend, sessions: Sessions | Any,
               password_hash: str | None = None,
               trusted_proxies: tuple[Network, ...] = ()) -> Starlette:
    """The panel over ``backend``; ``sessions`` holds the one-time sign-in token (local), or
    is a store with ``token_sign_in = True``, ``sign_in(token, client)``, ``get`` and
    ``sign_out`` (the cluster's, in control: docs/panel.md "Cluster"). Mounted under a
    prefix (control's ``/ui``), every link and redirect carries the mount's ``root_path``.
    ``password_hash``: the stored local password (:mod:`qinglong.panel.password`), None: no
    password sign-in. ``trusted_proxies``: the peers whose ``X-Forwarded-For``/``-Proto``
    decide the client address and scheme (:mod:`qinglong.panel.proxies`; none by default:
    every request is taken as its peer sent it). The navigation shows the optional pages in
    ``backend.features``; a page the profile does not serve answers 501 "not available in
    this profile"."""
    token_sign_in = bool(getattr(sessions, "token_sign_in", False))
    env = Environment(loader=PackageLoader("qinglong.panel", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.filters["when"] = times.when
    env.filters["codes"] = i18n.code_spans

    def render(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        lang = request.state.lang
        messages = i18n.catalog(lang)
        session: Session | None = request.state.session
        html = env.get_template(name).render(
            t=messages, lang=lang, session=session, profile=backend.profile,
            csrf=session.csrf if session else "", path=request.url.path,
            here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            root=_root(request), features=backend.features,
            password_enabled=password_hash is not None, languages=i18n.LANGUAGES, **ctx)
        return HTMLResponse(html, status_code=status)

    def signin_page(request: Request, status: int, **ctx: Any) -> HTMLResponse:
        if token_sign_in:
            return render(request, "signin_token.html", status, **ctx)
        return render(request, "signin.html", status, **{"used": False, **ctx})

    class Guard(BaseHTTPMiddleware):
        async def dispatch(self, request: Request,
                           call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            request.state.lang = i18n.negotiate(request.cookies.get(i18n.COOKIE),
                                                request.headers.get("accept-language"))
            cookie = request.cookies.get(SESSION_COOKIE)
            request.state.session = (await anyio.to_thread.run_sync(sessions.get, cookie)
                                     if cookie else None)
            current_session.set(request.state.session)
            path = _relative(request)
            public = path.startswith(("/static/", "/signin", "/lang"))
            writes = request.method not in ("GET", "HEAD")
            if not public and request.state.session is None:
                response: Response = signin_page(request, 401, next=request.url.path)
            elif writes and (ok := await _state_change_ok(request)) is None:
                response = render(request, "error.html", 413,
                                  message_key="error.form_too_large")
            elif writes and not ok:
                response = render(request, "error.html", 403, message_key="error.csrf")
            elif writes and path not in ("/lang", "/signin", "/signout") \
                    and not request.state.session.can_write:
                response = render(request, "error.html", 403, message_key="error.read_only")
            else:
                response = await call_next(request)
            for key, value in SECURITY_HEADERS.items():
                response.headers[key] = value
            return response

    async def _state_change_ok(request: Request) -> bool | None:
        """True: a same-origin write with the session's CSRF token; None: its form has a
        field over task_pages.FORM_FIELD_MAX_BYTES."""
        try:
            return await _state_change_checked(request)
        except MultiPartException:
            return None

    async def _state_change_checked(request: Request) -> bool:
        session: Session | None = request.state.session
        if session is None and _relative(request).startswith(("/lang", "/signin")):
            request.state.form = dict(await task_pages.read_form(request))
            return origin_ok(request.headers.get("origin"), request.url.scheme,
                             request.headers.get("host"))
        if session is None:
            return False
        sent = request.headers.get(CSRF_HEADER)
        if sent is None:
            form = await task_pages.read_form(request)
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
        if token_sign_in:
            return await sign_in_token(request)
        if "token" not in request.query_params:  # no link: say how to get one
            return render(request, "signin.html", 200, used=False, wrong=False,
                          signed_out="signed_out" in request.query_params)
        session = sessions.redeem(request.query_params.get("token", ""))
        if session is None:
            request.state.session = None
            return render(request, "signin.html", 403, used=True)
        return _signed_in(request, session)

    async def sign_in_post(request: Request) -> Response:
        if token_sign_in:
            return await sign_in_token(request)
        return await sign_in_password(request)

    async def sign_in_password(request: Request) -> Response:
        """The local password form (docs/panel.md "Running it"): a new session on success,
        403 after a one-second pause otherwise."""
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
        return _signed_in(request, sessions.renew(request.state.session), _back(request))

    def _signed_in(request: Request, session: Session, target: str | None = None) -> Response:
        response = RedirectResponse(target or _root(request) + "/", status_code=303)
        response.set_cookie(SESSION_COOKIE, session.id, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path=_root(request) or "/")
        return response

    async def sign_in_token(request: Request) -> Response:
        """The cluster's form: GET shows it, POST signs in with an API token (the store
        throttles failures per client address: 429 with Retry-After)."""
        if request.method != "POST":
            if request.state.session is not None:
                return RedirectResponse(_root(request) + "/", status_code=303)
            return signin_page(request, 200)
        form = getattr(request.state, "form", None) or {}
        token = str(form.get("token", ""))[:200]
        client = request.client.host if request.client else "unknown"
        try:
            store: Any = sessions  # a store with token_sign_in (control's)
            session = await anyio.to_thread.run_sync(store.sign_in, token, client)
        except SignInThrottledError as exc:  # nothing of the token is echoed
            request.state.session = None
            page = signin_page(request, 429, error_key="signin.throttled")
            page.headers["Retry-After"] = str(int(exc.retry_after_s))
            return page
        except SignInRefusedError:
            request.state.session = None
            return signin_page(request, 403, error_key="signin.refused")
        return _signed_in(request, session)

    async def sign_out(request: Request) -> Response:
        cookie = request.cookies.get(SESSION_COOKIE)
        await anyio.to_thread.run_sync(sessions.sign_out, cookie)
        response = RedirectResponse(_root(request) + "/signin"
                                    + ("" if token_sign_in else "?signed_out=1"),
                                    status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=_root(request) or "/", httponly=True,
                               samesite="strict", secure=request.url.scheme == "https")
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
        sort = view_pages.sort_of(request)
        try:
            page, views = await view_pages.tasks_and_views(call, backend, offset, PAGE_SIZE,
                                                           query, sort)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        partial = request.headers.get("hx-request") == "true"
        return render(request, "tasks_table.html" if partial else "tasks.html",
                      page=page, query=query, page_size=PAGE_SIZE, sort=sort, views=views,
                      done=task_pages.count_param(request, "done"),
                      failed=task_pages.count_param(request, "failed"))

    async def task_action(request: Request) -> Response:
        name = request.path_params["name"]
        action = request.path_params["action"]
        try:
            if action == "run":
                run = await call(backend.run_now, name)
                return RedirectResponse(f"{_root(request)}/runs/{run['id']}",
                                        status_code=303)
            if action in ("enable", "disable"):
                await call(backend.set_enabled, name, action == "enable")
                return RedirectResponse(_back(request), status_code=303)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            return render(request, "error.html", 400 if exc.usage else 409,
                          message_key=refusal_key(exc))
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
        return render(request, "run.html", run=run, statuses_json=json.dumps(names),
                      pinned=_attempt_param(request), reference=run_facts.run_reference(run),
                      attempts=run_facts.attempt_facts(run, i18n.catalog(request.state.lang)))

    async def run_event(request: Request, run: str) -> str:
        """The stream's ``run`` event: the run's status and its attempts' facts as the
        page's HTML (run_facts.html, rendered here so times and words match the page);
        "" when the run cannot be read (the next poll tries again)."""
        try:
            info = await call(backend.run_get, run)
        except (BackendUnavailableError, BackendRefusedError):
            return ""
        messages = i18n.catalog(request.state.lang)
        html = env.get_template("run_facts.html").render(
            t=messages, attempts=run_facts.attempt_facts(info, messages))
        data = json.dumps({"status": info.get("status"), "html": html})
        return f"event: run\ndata: {data}\n\n"

    async def run_stop(request: Request) -> Response:
        run = request.path_params["run"]
        try:
            await call(backend.cancel_run, run)
        except BackendUnavailableError:
            return render(request, "owner_down.html", 503)
        except BackendRefusedError as exc:
            return render(request, "error.html", 404 if exc.code == "not_found" else 409,
                          message_key="error.refused")
        return RedirectResponse(f"{_root(request)}/runs/{run}", status_code=303)

    async def log_stream(request: Request) -> Response:
        """The run's log as Server-Sent Events (docs/panel.md "Run detail"). Event ids are
        ``ATTEMPT:OFFSET`` (the attempt's number, the byte offset after the event), which
        the browser resends as Last-Event-ID (a bare offset: the newest attempt's). Without
        ``?attempt=N`` the stream follows the run: from the newest attempt when it opens
        to each retry after it, announced by an ``attempt`` event (data: its number); with
        it, that attempt's log alone, ended by ``end`` when read to its end and a newer
        attempt exists or the run ended."""
        run = request.path_params["run"]
        cookie = request.cookies.get(SESSION_COOKIE)
        pinned = _attempt_param(request)
        current, offset = _resume(request.headers.get("last-event-id")
                                  or request.query_params.get("offset"))
        if pinned is not None:
            current = pinned
        waiter = getattr(backend, "log_wait_async", None)

        async def wait(number: int | None, at: int, timeout_s: float) -> dict[str, Any]:
            # a backend that can wait without holding a worker thread (control's, woken by
            # its LISTEN fan-out) offers log_wait_async
            if waiter is not None:
                result: dict[str, Any] = await waiter(run, at, timeout_s, number)
                return result
            return await call_log_wait(run, at, timeout_s, number)

        async def events() -> AsyncIterator[str]:
            nonlocal offset, current
            yield "retry: 2000\n\n"
            # the run's status and attempt count last sent: a change sends a "run" event;
            # before the run starts, polls are short so "running" shows without output
            seen: tuple[Any, Any] | None = None
            while not await request.is_disconnected():
                early = seen is None or seen[0] in ("queued", "dispatching")
                try:
                    chunk = await wait(current, offset, RUN_POLL_S if early else LOG_WAIT_S)
                except (BackendUnavailableError, BackendRefusedError):
                    yield "event: unavailable\ndata: {}\n\n"
                    return
                state = (chunk.get("run_status"), chunk.get("attempts"))
                if state != seen:
                    seen = state
                    if pinned is None:
                        yield await run_event(request, run)
                number = int(chunk.get("attempt") or current or 1)
                newer = int(chunk.get("attempts") or 0) > number
                if current is None:  # opened on the newest attempt: name it after a retry
                    current = number
                    if number > 1 and offset == 0 and pinned is None:
                        yield f"event: attempt\nid: {number}:0\ndata: {number}\n\n"
                if chunk.get("gap"):  # raw bytes the log cap left out (protocols §3.8)
                    offset = int(chunk["offset"])
                    yield f"event: gap\nid: {current}:{offset}\ndata: {int(chunk['gap'])}\n\n"
                elif chunk["data"]:
                    offset = int(chunk["offset"])
                    text = chunk["data"].encode("utf-8", "surrogateescape").decode(
                        "utf-8", "replace")
                    yield f"id: {current}:{offset}\ndata: {json.dumps(text)}\n\n"
                elif newer and pinned is None:  # this attempt's log is whole: the retry's next
                    current, offset = current + 1, 0
                    yield f"event: attempt\nid: {current}:0\ndata: {current}\n\n"
                else:
                    yield ": waiting\n\n"
                # every heartbeat re-checks the session: a signed-out session or a revoked
                # token (cluster) ends the stream at once
                if await anyio.to_thread.run_sync(sessions.get, cookie) is None:
                    yield "event: unavailable\ndata: {}\n\n"
                    return
                if not chunk["data"] and not chunk.get("gap") and (
                        chunk["done"] or (newer and pinned is not None)):
                    if pinned is None:  # the final facts (end time, exit code) first
                        yield await run_event(request, run)
                    yield f"event: end\ndata: {json.dumps(chunk['run_status'])}\n\n"
                    return

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"X-Accel-Buffering": "no"})

    async def log_download(request: Request) -> Response:
        run = request.path_params["run"]
        number = _attempt_param(request)

        async def body() -> AsyncIterator[bytes]:
            offset = 0
            while True:
                chunk = await call(backend.log_read, run, offset, number)
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
        name = "run.log" if number is None else f"run-attempt-{number}.log"
        return StreamingResponse(body(), media_type="text/plain; charset=utf-8", headers={
            "Content-Disposition": f'attachment; filename="{name}"'})

    async def not_in_profile(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 501, message_key="error.not_in_profile")

    async def form_too_large(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 413, message_key="error.form_too_large")

    static = StaticFiles(packages=[("qinglong.panel", "static")])
    return Starlette(routes=[
        Route("/", tasks),
        Route("/signin", sign_in),
        Route("/signin", sign_in_post, methods=["POST"]),
        Route("/signout", sign_out, methods=["POST"]),
        *var_pages.routes(render, call, backend),
        *script_pages.routes(render, call, backend),
        *bundle_pages.routes(render, call, backend),
        *settings_pages.routes(render, call, backend),
        Route("/lang", set_lang, methods=["POST"]),
        # the cluster's task form (the API's JSON) takes the form's paths before the local one
        *(cluster_task_pages.routes(render, call, backend)
          if backend.profile == "cluster" else []),
        *task_pages.routes(render, call, backend),
        *occurrence_pages.routes(render, call, backend),
        *worker_pages.routes(render, call, backend),
        *view_pages.routes(render, call, backend),
        Route("/tasks/{name:path}/{action}", task_action, methods=["POST"]),
        Route("/runs/{run}", run_detail),
        Route("/runs/{run}/log/stream", log_stream),
        Route("/runs/{run}/stop", run_stop, methods=["POST"]),
        Route("/runs/{run}/log.txt", log_download),
        Mount("/static", static, name="static"),
    ], middleware=[Middleware(TrustedProxies, networks=trusted_proxies), Middleware(Guard)],
        exception_handlers={NotInProfileError: not_in_profile,
                            MultiPartException: form_too_large})


def refusal_key(exc: BackendRefusedError) -> str:
    """The catalog key wording a row action's refusal: a run refused by the forbid policy
    (the local owner's and the cluster's words, local/scheduling/slot_policy.py and
    control/panel_backend.py) has its own, the others the general ``error.refused``."""
    if exc.code == "run_refused" or "policy is forbid" in exc.message:
        return "forms.err.run_forbid"
    return "error.refused"


def _attempt_param(request: Request) -> int | None:
    """``?attempt=N`` (1-1000) of a run's page, stream or download; None when absent or not
    a number in range (the newest attempt, followed)."""
    value = request.query_params.get("attempt", "")
    return int(value) if value.isdigit() and 1 <= int(value) <= 1000 else None


def _resume(last: str | None) -> tuple[int | None, int]:
    """(attempt number or None, byte offset) from a Last-Event-ID ``ATTEMPT:OFFSET`` or a
    bare ``OFFSET`` (the newest attempt's); anything else is the start (None, 0)."""
    number, _, offset = (last or "").rpartition(":")
    if not offset.isdigit() or (number and not number.isdigit()):
        return None, 0
    return (int(number) if number and int(number) >= 1 else None), int(offset)


_back = paths.back
_root = paths.root
_relative = paths.relative
