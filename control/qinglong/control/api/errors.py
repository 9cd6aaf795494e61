"""API errors: JSON with a stable code, never a stack trace, SQL, secret or echoed input.

Every answer that is not a success has the body
``{"error": {"code": "<stable_code>", "message": "<one line, no input values>"}}``. Route code
raises ``ApiError``; ``install_error_handlers`` maps it, FastAPI's validation errors (which
would echo the input) and anything unexpected (500 ``internal``, logged server-side without
the request body) to that shape.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

_log = logging.getLogger("qinglong.control.api")


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

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)
