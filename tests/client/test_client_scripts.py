"""``ql3 cluster script``'s client side (issue 13 item 1; docs/protocols.md §4.7): a bundle is
sent as raw gzip bytes with its media type; bundle refusals, an unknown bundle and a bundle
in use become one typed line each; a digest prefix is resolved through one keyset page
starting just below it. Answers come from ``httpx.MockTransport``."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from qinglong.client.cli_scripts import resolve_digest
from qinglong.client.errors import (
    ControlConflictError,
    ControlFailedError,
    ControlNotFoundError,
    ControlRejectedError,
)
from qinglong.client.http import ControlClient
from qinglong.shared.errors import ValidationError

TOKEN = "ql3_" + "s" * 43
DIGESTS = sorted(hashlib.sha256(bytes([i])).hexdigest() for i in range(40))


def client(handler: Any) -> ControlClient:
    return ControlClient("http://c1:8080", TOKEN, transport=httpx.MockTransport(handler))


def error(status: int, code: str, message: str, **extra: Any) -> Any:
    return lambda _request: httpx.Response(
        status, json={"error": {"code": code, "message": message, **extra}})


def test_a_bundle_is_sent_as_raw_bytes_with_its_media_type() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"digest": "d"})

    status, body = client(handler).send_content("POST", "/v1/scripts", b"\x1f\x8bdata",
                                                "application/gzip")
    assert (status, body) == (200, {"digest": "d"})
    assert seen[0].headers["content-type"] == "application/gzip"
    assert seen[0].content == b"\x1f\x8bdata"


@pytest.mark.parametrize(("status", "code", "reason"), [(422, "bundle_invalid", "link"),
                                                          (413, "bundle_too_large",
                                                           "too_many_members")])
def test_a_refused_bundle_says_why_with_the_reason_and_is_a_usage_error(
        status: int, code: str, reason: str) -> None:
    with pytest.raises(ControlRejectedError) as caught:
        client(error(status, code, "member 3 is a link", reason=reason)).send_content(
            "POST", "/v1/scripts", b"x", "application/gzip")
    assert isinstance(caught.value, ValidationError)
    assert str(caught.value) == f"control refused the bundle: member 3 is a link ({reason})"


def test_an_unknown_bundle_is_named_but_a_missing_route_is_not_taken_for_one() -> None:
    with pytest.raises(ControlNotFoundError) as caught:
        client(error(404, "not_found", "no bundle has this digest")).get(
            "/v1/scripts/ab", script="abcdef12")
    assert str(caught.value) == "no script bundle 'abcdef12'"
    with pytest.raises(ControlFailedError) as route:  # the framework's own 404
        client(error(404, "not_found", "not found")).get("/v1/scripts/ab", script="abcdef12")
    assert "no such endpoint" in str(route.value)


def test_a_bundle_in_use_is_a_conflict_naming_it() -> None:
    with pytest.raises(ControlConflictError) as caught:
        client(error(409, "bundle_in_use", "a live task names this bundle")).send(
            "DELETE", "/v1/scripts/ab", script="abcdef12")
    assert caught.value.error_code == "bundle_in_use"
    assert str(caught.value) == "script bundle 'abcdef12' is in use: a live task names this bundle"


def listing(requests: list[httpx.Request], digests: list[str] = DIGESTS) -> Any:
    """``GET /v1/scripts``'s keyset listing over ``digests`` (sorted; ``digest > cursor``)."""
    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        cursor = request.url.params.get("cursor")
        limit = int(request.url.params["limit"])
        items = [{"digest": d} for d in digests if cursor is None or d > cursor][:limit]
        return httpx.Response(200, json={"items": items, "next_cursor": None})

    return handler


def test_a_unique_prefix_resolves_with_one_request_for_two_items() -> None:
    requests: list[httpx.Request] = []
    for digest in DIGESTS:
        prefix = digest[:8].upper()
        assert resolve_digest(client(listing(requests)), f" {prefix} ") == digest
    assert {r.url.params["limit"] for r in requests} == {"2"}
    assert len(requests) == len(DIGESTS)


def test_a_whole_digest_is_taken_as_given_without_a_request() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"unexpected request {request.url}")

    assert resolve_digest(client(handler), DIGESTS[0]) == DIGESTS[0]


def test_a_prefix_of_no_digest_or_of_several_is_a_usage_error() -> None:
    unknown = next(f"{n:08x}" for n in range(16**8) if not any(
        d.startswith(f"{n:08x}") for d in DIGESTS))
    with pytest.raises(ControlNotFoundError) as caught:
        resolve_digest(client(listing([])), unknown)
    assert str(caught.value) == f"no script bundle's digest starts with {unknown!r}"
    other = "0" if DIGESTS[5][12] != "0" else "1"  # shares 12 digits, not the 13th
    twins = sorted([*DIGESTS, DIGESTS[5][:12] + other * 52])
    with pytest.raises(ValidationError, match="more than one bundle's digest"):
        resolve_digest(client(listing([], twins)), DIGESTS[5][:10])
    assert resolve_digest(client(listing([], twins)), DIGESTS[5][:13]) == DIGESTS[5]


@pytest.mark.parametrize("text", ["", "abc", "abcdef1", "abcdefgh", "a" * 65, "0x" + "a" * 8])
def test_text_that_is_no_digest_is_refused_before_any_request(text: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"unexpected request {request.url}")

    with pytest.raises(ValidationError, match="8 to 64 hex digits"):
        resolve_digest(client(handler), text)


def test_the_all_zero_prefix_lists_from_the_start() -> None:
    requests: list[httpx.Request] = []
    zero = "0" * 64
    assert resolve_digest(client(listing(requests, [zero, *DIGESTS])), "0" * 8) == zero
    assert "cursor" not in requests[0].url.params
