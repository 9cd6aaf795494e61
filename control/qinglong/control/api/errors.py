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

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        fields = sorted({".".join(str(p) for p in err.get("loc", ()))
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
