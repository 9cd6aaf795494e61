"""A loopback HTTP proxy between a worker and control, for fault tests (issue 11 "Tests").

It runs in the test process (threads) and forwards every request to one upstream base URL,
keeping method, path, headers and body. Faults are switched while it runs:

- ``cut(True)``: every request is answered by closing the connection without a byte
  (control unreachable from the worker; nothing is forwarded);
- ``drop_response(path, count)``: the next ``count`` requests to ``path`` are forwarded, the
  upstream answer is read, then the client connection is closed without a byte of it (control
  applied the write, the worker never learns it).

Every request is recorded (``records()``): method, path, forwarded upstream status (None when
not forwarded), ``dropped``, ``cut``, the JSON request and answer bodies (worker routes carry
lease triples, never the token, which travels only in a header) and ``at`` (monotonic s).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
              "trailer", "upgrade", "host"}


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


class LoopbackProxy(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream_url: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        parsed = urllib.parse.urlsplit(upstream_url)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self._lock = threading.Lock()
        self._cut = False
        self._drops: dict[str, int] = {}
        self._records: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def cut(self, on: bool) -> None:
        with self._lock:
            self._cut = on

    def drop_response(self, path: str, count: int = 1) -> None:
        with self._lock:
            self._drops[path] = count

    def records(self, path: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._records if path is None or r["path"] == path]

    def _decide(self, path: str) -> tuple[bool, bool]:
        """(cut, drop) for one request arriving now."""
        with self._lock:
            if self._cut:
                return True, False
            left = self._drops.get(path, 0)
            if left > 0:
                self._drops[path] = left - 1
                return False, True
            return False, False

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self._records.append(entry)

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LoopbackProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _hang_up(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        path = urllib.parse.urlsplit(self.path).path
        cut, drop = self.server._decide(path)
        entry: dict[str, Any] = {"method": self.command, "path": path, "status": None,
                                 "cut": cut, "dropped": drop, "request": _json(body),
                                 "answer": None, "at": time.monotonic()}
        if cut:
            self.server._record(entry)
            self._hang_up()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        try:
            conn.request(self.command, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            status, resp_headers = resp.status, resp.getheaders()
        except OSError:
            entry["dropped"] = True
            self.server._record(entry)
            self._hang_up()
            return
        finally:
            conn.close()
        entry.update(status=status, answer=_json(payload), done=time.monotonic())
        self.server._record(entry)
        if drop:
            self._hang_up()
            return
        self.send_response_only(status)
        for key, value in resp_headers:
            if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()
