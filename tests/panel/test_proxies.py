"""``qinglong.panel.proxies`` (docs/panel.md "Behind a reverse proxy"): which peer's
X-Forwarded-For and X-Forwarded-Proto count, and which address is the client."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from qinglong.panel.proxies import TrustedProxies, forwarded_client, parse_trusted

LOCAL = parse_trusted("127.0.0.1,10.0.0.0/8,::1")


def test_parse_takes_addresses_and_networks_and_names_a_bad_entry() -> None:
    assert [str(n) for n in parse_trusted(" 127.0.0.1 , 10.1.2.3/8,,::1")] == [
        "127.0.0.1/32", "10.0.0.0/8", "::1/128"]
    assert parse_trusted(None) == () and parse_trusted("") == ()
    with pytest.raises(ValueError, match="'localhost' is not an IP address"):
        parse_trusted("127.0.0.1,localhost")


@pytest.mark.parametrize(("peer", "header", "client"), [
    ("203.0.113.5", "198.51.100.1", "203.0.113.5"),  # untrusted peer: header ignored
    ("127.0.0.1", None, "127.0.0.1"),
    ("127.0.0.1", "198.51.100.1", "198.51.100.1"),
    # what the client wrote before the proxy appended its peer does not count
    ("127.0.0.1", "6.6.6.6, 198.51.100.1", "198.51.100.1"),
    # a chain of trusted proxies is walked back to the first address that is not one
    ("127.0.0.1", "198.51.100.1, 10.0.0.7", "198.51.100.1"),
    ("127.0.0.1", "10.0.0.8, 10.0.0.7", "10.0.0.8"),  # all trusted: the leftmost
    ("127.0.0.1", "garbage, 10.0.0.7", "10.0.0.7"),  # no address: the last good one
    ("::1", "[2001:db8::1]:4711", "2001:db8::1"),
    ("::ffff:127.0.0.1", "198.51.100.1:80", "198.51.100.1"),
])
def test_forwarded_client(peer: str, header: str | None, client: str) -> None:
    assert forwarded_client(peer, header, LOCAL) == client


def _through(peer: str, headers: list[tuple[str, str]], kind: str = "http",
             networks: Any = LOCAL) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)

    scope = {"type": kind, "client": (peer, 5555), "scheme": "http" if kind == "http" else "ws",
             "headers": [(k.encode(), v.encode()) for k, v in headers]}
    asyncio.run(TrustedProxies(app, networks)(scope, None, None))  # type: ignore[arg-type]
    return seen


def test_middleware_rewrites_only_for_a_trusted_peer() -> None:
    headers = [("X-Forwarded-For", "198.51.100.1"), ("X-Forwarded-Proto", "https")]
    trusted = _through("127.0.0.1", headers)
    assert trusted["client"] == ("198.51.100.1", 0) and trusted["scheme"] == "https"
    other = _through("203.0.113.5", headers)
    assert other["client"] == ("203.0.113.5", 5555) and other["scheme"] == "http"
    nobody = _through("127.0.0.1", headers, networks=())
    assert nobody["client"] == ("127.0.0.1", 5555) and nobody["scheme"] == "http"
    ws = _through("127.0.0.1", headers, kind="websocket")
    assert ws["scheme"] == "wss"
    odd = _through("127.0.0.1", [("X-Forwarded-Proto", "gopher")])
    assert odd["scheme"] == "http"
    repeated = _through("127.0.0.1", [("x-forwarded-for", "6.6.6.6"),
                                      ("X-Forwarded-For", "198.51.100.2")])
    assert repeated["client"] == ("198.51.100.2", 0)
