"""Reverse proxies the panel believes (docs/panel.md "Behind a reverse proxy").

``--trusted-proxy ADDR[,ADDR]`` (``ql3 local web``, ``ql3 local serve --web``,
``ql3 control serve``) names the peers whose ``X-Forwarded-For`` and ``X-Forwarded-Proto``
count: from them, the client address (what the cluster's sign-in throttle counts) and the
scheme (whether the session cookie is ``Secure``, and the origin the CSRF check expects) come
from those headers; from any other peer both headers are ignored and the peer itself is the
client. uvicorn's own handling (``FORWARDED_ALLOW_IPS``) is turned off where the panel is
served (``proxy_headers=False``), so this middleware is the only one reading them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]

SCHEMES = {"http": "http", "https": "https"}
WS_SCHEMES = {"http": "ws", "https": "wss"}


def parse_trusted(value: str | Iterable[str] | None) -> tuple[Network, ...]:
    """``ADDR[,ADDR]`` (or several such strings) -> networks: each ADDR an IP address
    (IPv4 or IPv6) or a network in CIDR form (``10.0.0.0/8``). Empty or None: none.
    Raises ValueError naming the option and the bad entry (no other input echoed)."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else list(value)
    found: list[Network] = []
    for item in items:
        for part in item.split(","):
            entry = part.strip()
            if not entry:
                continue
            try:
                found.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                raise ValueError(f"--trusted-proxy: {entry[:60]!r} is not an IP address "
                                 "or a network (ADDR or ADDR/PREFIX)") from None
    return tuple(found)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
             networks: tuple[Network, ...]) -> bool:
    if address is None:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return any(address in net for net in networks)


def forwarded_client(peer: str, forwarded_for: str | None,
                     networks: tuple[Network, ...]) -> str:
    """The client address of a request from ``peer``: ``peer`` itself unless it is trusted
    and ``X-Forwarded-For`` names someone; then the rightmost address that is not a trusted
    proxy (the leftmost when every one is). An entry that is not an address ends the walk
    at the last good one (a proxy's garbage is never a client address)."""
    if not forwarded_for or not _trusted(_address(peer), networks):
        return peer
    client = peer
    for entry in reversed([e for e in forwarded_for.split(",") if e.strip()]):
        address = _address(entry)
        if address is None:
            return client
        client = str(address)
        if not _trusted(address, networks):
            return client
    return client


class TrustedProxies:
    """ASGI middleware: rewrites the scope's ``client`` and ``scheme`` from
    ``X-Forwarded-For`` / ``X-Forwarded-Proto`` when, and only when, the connection's peer
    is in ``networks`` (module docstring)."""

    def __init__(self, app: Asgi, networks: tuple[Network, ...] = ()) -> None:
        self.app = app
        self.networks = networks

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.networks and scope.get("client"):
            peer = str(scope["client"][0])
            if _trusted(_address(peer), self.networks):
                headers = _headers(scope)
                forwarded_for = headers.get("x-forwarded-for")
                if forwarded_for:
                    scope["client"] = (forwarded_client(peer, forwarded_for, self.networks),
                                       0)
                proto = (headers.get("x-forwarded-proto") or "").split(",")[-1].strip()
                table = SCHEMES if scope["type"] == "http" else WS_SCHEMES
                if proto.lower() in table:
                    scope["scheme"] = table[proto.lower()]
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    """Header name -> value, repeated headers joined with ``,`` (as RFC 9110 allows)."""
    found: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers") or ():
        name = raw_name.decode("latin-1").lower()
        value = raw_value.decode("latin-1")
        found[name] = f"{found[name]},{value}" if name in found else value
    return found
