"""API errors: JSON with a stable code, never a stack trace, SQL, secret or echoed input.

Every answer that is not a success has the body
``{"error": {"code": "<stable_code>", "message": "<one line, no input values>"}}``. Route code
raises ``ApiError``; ``install_error_handlers`` maps it, FastAPI's validation errors (which
would echo the input; answered as each field's location and a reason from a fixed vocabulary,
``REASONS``), a database that cannot be reached (503 ``database_unavailable``: retry
later) and anything unexpected (500 ``internal``, logged server-side without the request body)
to that shape.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from qinglong.shared.names import NAME_RULE

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
    non-secret facts (e.g. a log's retirement time) under ``error``; ``retry_after_s`` among
    them is also sent as the ``Retry-After`` header (seconds)."""

    #: for one refused body field (``task_store.invalid``): ``(field, reason code, params)``,
    #: so the panel's task form can say it in the user's language; never part of an answer
    problem: tuple[str, str, dict[str, str]] | None = None

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


# pydantic error types as words (a fixed vocabulary: the input is never quoted). ``{name}``
# takes the error's ``ctx`` entry of that name: limits and patterns of our own schema.
REASONS = {
    "missing": "missing",
    "int_type": "not an integer", "int_parsing": "not an integer",
    "int_from_float": "not an integer", "float_type": "not a number",
    "float_parsing": "not a number", "string_type": "not a string",
    "bool_type": "not a boolean", "bool_parsing": "not a boolean",
    "list_type": "not a list", "dict_type": "not an object", "model_type": "not an object",
    "model_attributes_type": "not an object", "none_required": "must be null",
    "string_too_long": "too long (at most {max_length} characters)",
    "string_too_short": "too short (at least {min_length} characters)",
    "too_long": "too many items (at most {max_length})",
    "too_short": "too few items (at least {min_length})",
    "greater_than_equal": "less than the minimum {ge}",
    "greater_than": "not greater than {gt}",
    "less_than_equal": "greater than the maximum {le}",
    "less_than": "not less than {lt}",
    "string_pattern_mismatch": "contains characters that are not allowed here",  # see below
    "literal_error": "not one of {expected}", "enum": "not one of {expected}",
    "uuid_type": "not a UUID", "uuid_parsing": "not a UUID",
    "json_invalid": "not valid JSON", "json_type": "not valid JSON",
    "string_unicode": "not valid Unicode",
}
# The patterns of our own schema in words, for ``string_pattern_mismatch`` (people read the
# message: a regular expression tells them little; tests/control/test_api_error_words.py
# holds every pattern the models declare to an entry here). Another pattern reads
# "contains characters that are not allowed here".
PATTERN_WORDS = {
    r"^[A-Za-z_][A-Za-z0-9_]{0,127}$":  # env names (task_models.ENV_NAME_PATTERN)
        "use 1-128 ASCII letters, digits or '_', not starting with a digit",
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$":  # label keys (task_models.LABEL_PATTERN)
        "use 1-63 ASCII letters, digits, '_', '.' or '-', starting with a letter or digit",
    r"^[a-z0-9][a-z0-9_.-]{0,62}$":  # worker pools (token_routes.POOL_PATTERN)
        "use 1-63 lowercase ASCII letters, digits, '_', '.' or '-', starting with a letter "
        "or digit",
    r"^[0-9a-f]{64}$":  # bundle digests (script_models.DIGEST_PATTERN)
        "use the 64 lowercase hex digits of a bundle digest",
    r"^[^\x00-\x1f\x7f]+$": "contains control characters",  # token names
    r"^[^\x00]*$": "contains NUL",  # any text (task_models._PLAIN)
}
NOT_ALLOWED = REASONS["string_pattern_mismatch"]

# messages our own validators raise (``ValueError`` in an AfterValidator) that may be shown
OWN_MESSAGES = frozenset({"contains NUL", "is not valid Unicode", NAME_RULE})


def reason(kind: str, ctx: Any) -> str:
    """The words for a pydantic error of type ``kind`` (``REASONS``; ``ctx`` fills the
    schema's limits; a pattern is said in words, ``PATTERN_WORDS``), our own validator's
    message when it is one of ``OWN_MESSAGES``, else "invalid value". Never the input."""
    if kind == "value_error" and isinstance(ctx, dict):
        message = str(ctx.get("error", ""))
        return message if message in OWN_MESSAGES else "invalid value"
    if kind == "string_pattern_mismatch":  # the pattern in words, never the regex itself
        pattern = ctx.get("pattern") if isinstance(ctx, dict) else None
        return PATTERN_WORDS.get(str(pattern), NOT_ALLOWED)
    template = REASONS.get(kind)
    if template is None:
        return "invalid value"
    try:
        return template.format(**(ctx if isinstance(ctx, dict) else {}))
    except (KeyError, IndexError, ValueError):  # no ctx: the words without the limit
        return template.split(" {")[0].split(" (")[0]


def accepted_fields(document: dict[str, Any], request: Request,
                    loc: tuple[Any, ...]) -> list[str]:
    """The property names the OpenAPI ``document`` declares for the object at ``loc``
    (``("body", ...)``) of the request's route; empty when it cannot be resolved."""
    route = request.scope.get("route")
    path = getattr(route, "path", None)
    if not loc or loc[0] != "body" or path is None:
        return []
    schemas = document.get("components", {}).get("schemas", {})

    def resolve(node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            node = schemas.get(str(node["$ref"]).rsplit("/", 1)[-1], {})
        return node

    def step(node: Any, part: Any) -> Any:
        node = resolve(node)
        for option in node.get("anyOf", []) if isinstance(node, dict) else []:
            found = step(option, part)
            if found is not None:
                return found
        if not isinstance(node, dict):
            return None
        if isinstance(part, int):
            return node.get("items")
        props = node.get("properties", {})
        if part in props:
            return props[part]
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return extra
        patterned = list((node.get("patternProperties") or {}).values())
        return patterned[0] if len(patterned) == 1 else None

    operation = document.get("paths", {}).get(path, {}).get(request.method.lower(), {})
    node: Any = (operation.get("requestBody", {}).get("content", {})
                 .get("application/json", {}).get("schema"))
    for part in loc[1:]:
        if node is None:
            return []
        node = step(node, part)
    node = resolve(node)
    for option in node.get("anyOf", []) if isinstance(node, dict) else []:
        if isinstance(resolve(option), dict) and "properties" in resolve(option):
            node = resolve(option)
    return sorted(node.get("properties", {})) if isinstance(node, dict) else []


def install_error_handlers(app: FastAPI) -> None:
    """Map ApiError, request validation errors (422 ``invalid_request``: each error's field
    location, client-chosen keys as ``*``, with a fixed-vocabulary ``reason``; an unknown
    field is named by its parent with the accepted names), HTTP errors raised by the
    framework (404/405 …) and any other exception (500 ``internal``) to the JSON error
    shape."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

    async def api_error(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        retry = exc.extra.get("retry_after_s")
        return JSONResponse(error_body(exc.code, exc.message, **exc.extra),
                            status_code=exc.status,
                            headers={"Retry-After": str(retry)} if retry is not None else None)

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

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        document = app.openapi()
        entries: list[str] = []
        for err in exc.errors():
            loc = tuple(err.get("loc", ()))
            kind = str(err.get("type", ""))
            if kind == "extra_forbidden":  # the key is the client's: named by its parent
                names = accepted_fields(document, request, loc[:-1])
                where = ".".join(shown(p) for p in loc[:-1]) or "body"
                listed = f" (accepted: {', '.join(names)})" if names else ""
                entries.append(f"{where}: unknown field{listed}")
            else:
                where = ".".join(shown(p) for p in loc if p != "[key]")
                if loc and loc[-1] == "[key]":
                    where += " (key)"
                entries.append(f"{where}: {reason(kind, err.get('ctx'))}")
        fields = sorted(set(entries))[:10]
        return JSONResponse(error_body("invalid_request",
                                       "invalid fields: " + "; ".join(fields)),
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
