"""API errors: JSON with a stable code, never a stack trace, SQL, secret or echoed input.

Every answer that is not a success has the body
``{"error": {"code": "<stable_code>", "message": "<one line, no input values>"}}``. Route code
raises ``ApiError``; ``install_error_handlers`` maps it, FastAPI's validation errors (which
would echo the input), a database that cannot be reached (503 ``database_unavailable``: retry
later) and anything unexpected (500 ``internal``, logged server-side without the request body)
to that shape.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

_log = logging.getLogger("qinglong.control.api")

DB_UNAVAILABLE_LOG_EVERY_S = 10.0
"""At most one warning line per this many seconds for requests refused while the database
is away (a fleet of workers polling through an outage must not flood the log)."""


class ApiError(Exception):
    """An answer other than success: HTTP ``status``, stable ``code`` (snake_case) and a
    one-line ``message`` that names fields, never their values. ``extra`` adds fixed,
    non-secret facts (e.g. a log's retirement time) under ``error``."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def _declared_names(document: dict[str, Any]) -> set[str]:
    """Every property and parameter name an OpenAPI ``document`` declares, plus the
    request locations (body, query, path, header, cookie)."""
    names = {"body", "query", "path", "header", "cookie"}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("properties"), dict):
                names.update(node["properties"])
            if node.get("in") in ("query", "path", "header", "cookie") and "name" in node:
                names.add(str(node["name"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)
    return names


def install_error_handlers(app: FastAPI) -> None:
    """Map ApiError, request validation errors (422 ``invalid_request``, naming the fields'
    locations only), HTTP errors raised by the framework (404/405 …) and any other exception
    (500 ``internal``) to the JSON error shape."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    async def api_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return JSONResponse(error_body(exc.code, exc.message, **exc.extra),
                            status_code=exc.status)

    known: set[str] = set()

    def shown(part: Any) -> str:
        """A location part as answered: list indexes and names the API itself declares
        (OpenAPI properties and parameters); anything else — a dict key the client chose,
        such as an env or label name — becomes ``*``, so no input is echoed."""
        if not known:
            known.update(_declared_names(app.openapi()))
        if isinstance(part, int) or part in known:
            return str(part)
        return "*"

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        fields = sorted({".".join(shown(p) for p in err.get("loc", ()))
                         for err in exc.errors()})[:10]
        return JSONResponse(error_body("invalid_request",
                                       "invalid fields: " + ", ".join(fields)),
                            status_code=422)

    async def http_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, code.replace("_", " ")),
                            status_code=exc.status_code)

    async def unexpected(_request: Request, exc: Exception) -> JSONResponse:
        _log.error("internal error: %s", type(exc).__name__)
        return JSONResponse(error_body("internal", "internal error"), status_code=500)

    throttle = _Throttle(DB_UNAVAILABLE_LOG_EVERY_S)

    async def database_unavailable(_request: Request, exc: Exception) -> JSONResponse:
        # A handler of its own class, not Exception's: Starlette answers those in its
        # ExceptionMiddleware, whereas Exception's handler answers and then re-raises, and
        # uvicorn logs a full traceback per request ("Exception in ASGI application").
        suppressed = throttle.due()
        if suppressed is not None:
            _log.warning("database unavailable: %s; answered 503%s", type(exc).__name__,
                         f" ({suppressed} more since the last line)" if suppressed else "")
        return JSONResponse(error_body("database_unavailable",
                                       "the database is unavailable; retry later"),
                            status_code=503, headers={"Retry-After": "1"})

    from sqlalchemy.exc import InterfaceError, OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    # connection refused or lost, server shutting down, pool exhausted: transient, retry later
    for unavailable in (OperationalError, InterfaceError, PoolTimeoutError):
        app.add_exception_handler(unavailable, database_unavailable)
    app.add_exception_handler(Exception, unexpected)


class _Throttle:
    """``due()`` returns how many calls were suppressed since the last due one, at most once
    per ``every_s`` seconds (monotonic), else None. Thread-safe."""

    def __init__(self, every_s: float) -> None:
        self._every_s = every_s
        self._lock = threading.Lock()
        self._last: float | None = None
        self._suppressed = 0

    def due(self) -> int | None:
        now = time.monotonic()
        with self._lock:
            if self._last is not None and now - self._last < self._every_s:
                self._suppressed += 1
                return None
            self._last, suppressed, self._suppressed = now, self._suppressed, 0
            return suppressed
