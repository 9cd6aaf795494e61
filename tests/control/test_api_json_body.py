"""The bounded JSON decoder's scan (docs/protocols.md §4.5 "Input bounds"): each class of
refusal, and nothing refused inside strings."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qinglong.control.api.json_body import (
    MAX_DEPTH,
    MAX_NUMBER_CHARS,
    JsonBodyError,
    check_json,
)


def code_of(body: bytes) -> str:
    with pytest.raises(JsonBodyError) as caught:
        check_json(body)
    return caught.value.code


def test_nesting_up_to_the_bound_passes_and_one_more_level_is_too_deep() -> None:
    check_json(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH)
    check_json(json.dumps({"a": [{"b": [1, 2, {"c": None}]}]}).encode())
    assert code_of(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)) == "json_too_deep"
    assert code_of(b'{"a":' * 5000 + b"1" + b"}" * 5000) == "json_too_deep"


def test_brackets_digits_and_escapes_inside_strings_are_text() -> None:
    check_json(json.dumps({"s": "[" * 500 + "9" * 500 + '\\"{{{'}).encode())
    check_json(json.dumps({"签到": "京东"}, ensure_ascii=False).encode())


def test_long_numbers_and_bad_encodings_are_refused() -> None:
    check_json(b"[" + b"9" * MAX_NUMBER_CHARS + b"]")
    assert code_of(b"[" + b"9" * 5000 + b"]") == "json_number_too_long"
    assert code_of(b"[1." + b"0" * 100 + b"]") == "json_number_too_long"
    assert code_of('{"name": "签到"}'.encode("gbk")) == "json_not_utf8"
    assert code_of(b"\xff\xfe{}") == "json_not_utf8"


def test_an_unterminated_string_is_one_token_to_the_end_of_the_body() -> None:
    """The scan stays linear on hostile bodies: an unterminated string (``\\"`` repeated, a
    quote that never closes) is consumed once, as one token running to the end, instead of
    being tried again from each later quote (a quadratic scan before routing and auth)."""
    from qinglong.control.api.json_body import _STRUCTURE

    body = b'{"a": "' + b'\\"x' * 1000
    tokens = [m.group() for m in _STRUCTURE.finditer(body)]
    assert tokens[:3] == [b"{", b'"a"', body[6:]]
    assert len(tokens) == 3
    check_json(b'\\"' * 200_000)  # refused by nothing: not deep, no long number


def _through_guard(path: str, body: bytes, form_bound: int) -> tuple[int, bytes]:
    """Send ``body`` to ``path`` through JsonBodyGuard (a form path bounded by
    ``form_bound``); the status and the body the app saw (b"" when it was not called)."""
    import asyncio

    from qinglong.control.api.json_body import JsonBodyGuard

    seen: list[bytes] = []
    status: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    guard = JsonBodyGuard(app, form_paths={"/ui/bundles/upload": form_bound})
    asyncio.run(guard({"type": "http", "method": "POST", "path": path, "headers": []},
                      receive, send))
    return status[0], seen[0] if seen else b""


def test_a_form_path_is_bounded_but_not_scanned_as_json() -> None:
    binary = b"\x1f\x8b\x08\x00" + bytes(range(256))  # gzip bytes: not UTF-8
    assert _through_guard("/ui/bundles/upload", binary, 1024) == (200, binary)
    assert _through_guard("/ui/vars", binary, 1024)[0] == 400  # every other path is scanned
    assert _through_guard("/ui/bundles/upload", binary * 8, 1024)[0] == 413
