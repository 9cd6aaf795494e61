"""The bounded JSON decoder in front of every JSON body (docs/protocols.md §4.5, "Input
bounds").

``JsonBodyGuard`` is an ASGI middleware: before any route sees a request body, whatever its
``Content-Type`` (the worker routes decode theirs as JSON in any case), it reads the body —
refusing it once it passes
``MAX_BODY_BYTES`` — and checks it with ``check_json``; a refused body never reaches a route,
so neither pydantic's nor ``json``'s recursive parser ever sees it. Routes that take another
media type (the bundle push, ``raw_paths``) are left alone; they bound their own bodies.

Refusals, each in the API's JSON error shape (``errors.py``), never quoting the body:

=====================  ======  ==========================================================
code                   status  when
=====================  ======  ==========================================================
``body_too_large``     413     more than ``MAX_BODY_BYTES`` bytes (declared or streamed)
``json_not_utf8``      400     the bytes are not UTF-8
``json_too_deep``      400     arrays/objects nested more than ``MAX_DEPTH`` levels
``json_number_too_long`` 400   a number of more than ``MAX_NUMBER_CHARS`` characters
=====================  ======  ==========================================================

Syntax errors are left to the routes (422 ``invalid_request``, "not valid JSON"): the scan
here is linear, iterative and bounded, and a body that passes it parses with ``json``'s own
decoder without recursing deeper than ``MAX_DEPTH`` or converting a huge integer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

MAX_BODY_BYTES = 8 * 1024 * 1024
"""Largest JSON body (bytes): a worker's batch of live-log chunks (64 chunks of 64 KiB as
base64) is the largest legitimate one."""
MAX_DEPTH = 32
"""Deepest nesting of arrays and objects; the API's own bodies nest at most 4 levels."""
MAX_NUMBER_CHARS = 64
"""Longest number literal (characters, sign and exponent included)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A string token's closing quote is optional: an unterminated string is consumed once, to
# the end of the body. With the quote required, ``finditer`` would try a string again from
# every later quote of an unterminated one, a quadratic scan an unauthenticated body of a
# few MB turns into minutes of a blocked event loop.
_STRUCTURE = re.compile(rb'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]|[-+0-9.eE]+', re.DOTALL)


class JsonBodyError(Exception):
    """A body the decoder refuses: HTTP ``status``, stable ``code`` and fixed words."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def check_json(body: bytes) -> None:
    """Raise JsonBodyError unless ``body`` is UTF-8 (``json_not_utf8``), nests arrays and
    objects at most MAX_DEPTH deep (``json_too_deep``) and holds no number literal longer
    than MAX_NUMBER_CHARS (``json_number_too_long``). Strings are skipped whole, escapes
    included; the scan is one left-to-right pass (no recursion). Syntax is not checked."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        raise JsonBodyError(400, "json_not_utf8", "the body is not UTF-8 text") from None
    depth = 0
    for match in _STRUCTURE.finditer(body):
        token = match.group()
        first = token[:1]
        if first in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                raise JsonBodyError(400, "json_too_deep", "the JSON body nests arrays and "
                                    f"objects more than {MAX_DEPTH} levels deep")
        elif first in (b"]", b"}"):
            depth = max(0, depth - 1)
        elif first != b'"' and len(token) > MAX_NUMBER_CHARS:
            raise JsonBodyError(400, "json_number_too_long", "the JSON body holds a number "
                                f"of more than {MAX_NUMBER_CHARS} characters")


def _declared_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length" and value.isdigit():
            return int(value)
    return None


class JsonBodyGuard:
    """ASGI middleware: check every JSON request body with ``check_json`` (after bounding
    its size by ``max_bytes``) before the app sees it; answer refusals itself. GET, HEAD and
    OPTIONS requests and requests to ``raw_paths`` (exact paths of routes taking a non-JSON
    body) pass untouched. ``form_paths`` maps exact paths of routes taking a form that may
    hold binary (the panel's bundle upload) to their own byte bound: the body is bounded
    by it (413 ``body_too_large``) but not scanned as JSON."""

    def __init__(self, app: ASGIApp, raw_paths: frozenset[str] = frozenset(),
                 max_bytes: int = MAX_BODY_BYTES,
                 form_paths: dict[str, int] | None = None) -> None:
        self.app, self.raw_paths, self.max_bytes = app, raw_paths, max_bytes
        self.form_paths = dict(form_paths or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS")
                or scope.get("path") in self.raw_paths):
            await self.app(scope, receive, send)
            return
        form_bound = self.form_paths.get(str(scope.get("path")))
        try:
            body = await self._read(scope, receive, form_bound or self.max_bytes)
            if form_bound is None:
                check_json(body)
        except JsonBodyError as exc:
            await _answer(send, exc)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # a disconnect, after the body
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, scope: Scope, receive: Receive, bound: int) -> bytes:
        too_large = JsonBodyError(413, "body_too_large", "the body passes the bound of "
                                  f"{bound} bytes")
        declared = _declared_length(scope)
        if declared is not None and declared > bound:
            raise too_large
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            body += message.get("body", b"")
            if len(body) > bound:
                raise too_large
            if not message.get("more_body", False):
                break
        return bytes(body)


async def _answer(send: Send, exc: JsonBodyError) -> None:
    payload = json.dumps({"error": {"code": exc.code, "message": exc.message}}).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]
    if exc.status == 413:
        headers.append((b"connection", b"close"))  # the rest of the body is not read
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
