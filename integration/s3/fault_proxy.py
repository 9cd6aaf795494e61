"""Loopback HTTP fault proxy between boto3 and an S3 server (issue 4 tests; cases C08–C10).

Run as its own process (stdlib only):

    python fault_proxy.py --upstream 127.0.0.1:PORT --config FILE --log FILE --port-file FILE

It listens on 127.0.0.1 (a free port, written to ``--port-file``) and forwards every request
verbatim (headers, Host and body unchanged). ``--config`` is a JSON object re-read on every
request, so a test changes faults mid-test:

- ``latency_ms`` (int): sleep before forwarding each request;
- ``strip_if_match`` (bool): drop ``If-Match`` from DELETE requests (a backend that ignores it);
- ``drop_delete_response`` (bool): forward a DELETE, read the server's answer, then close the
  client connection without a byte of response (the server executed it, the client never knows);
- ``drop_delete_fraction`` (float 0..1): the same, for that random share of DELETEs;
- ``fail`` (object METHOD -> status): answer that status without forwarding (5xx injection).

Every DELETE appends one JSON line to ``--log``: key, version (``versionId`` query or null),
``if_match`` as received, ``forwarded_if_match``, upstream ``status`` (null when not forwarded),
``dropped``, and ``at``/``done`` (wall-clock seconds when the request arrived / the server
answered).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
              "trailer", "upgrade"}


class Proxy(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: tuple[str, int], config: str, log: str) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.upstream = upstream
        self.config_path = config
        self.log_path = log
        self.log_lock = threading.Lock()

    def config(self) -> dict[str, Any]:
        try:
            with open(self.config_path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def record(self, entry: dict[str, Any]) -> None:
        """One line, one ``write`` (O_APPEND): readable by the test as soon as this returns
        (no fsync: it serialised every DELETE behind a disk flush, and only a machine crash,
        which ends the test anyway, loses an unflushed line)."""
        line = (json.dumps(entry, sort_keys=True) + "\n").encode()
        with self.log_lock:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Proxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        cfg = self.server.config()
        body = self._body()
        latency = int(cfg.get("latency_ms") or 0)
        if latency > 0:
            time.sleep(latency / 1000)
        method = self.command
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            headers["Content-Length"] = str(len(body))
        is_delete = method == "DELETE"
        entry: dict[str, Any] = {}
        if is_delete:
            parsed = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(parsed.query)
            received = self.headers.get("If-Match")
            if cfg.get("strip_if_match"):
                headers = {k: v for k, v in headers.items() if k.lower() != "if-match"}
            versions = query.get("versionId")
            entry = {"key": urllib.parse.unquote(parsed.path),
                     "version": versions[0] if versions else None, "if_match": received,
                     "forwarded_if_match": next((v for k, v in headers.items()
                                                 if k.lower() == "if-match"), None),
                     "status": None, "dropped": False, "at": time.time()}
        fail = (cfg.get("fail") or {}).get(method)
        if fail:
            if is_delete:
                self.server.record(entry)
            self._reply(int(fail), [("Content-Length", "0")], b"")
            return
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=30)
        try:
            conn.request(method, self.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            status, resp_headers = resp.status, resp.getheaders()
        finally:
            conn.close()
        if is_delete:
            entry["status"] = status
            entry["done"] = time.time()
            fraction = float(cfg.get("drop_delete_fraction") or 0.0)
            entry["dropped"] = bool(cfg.get("drop_delete_response")) or (
                fraction > 0 and random.random() < fraction)
            self.server.record(entry)
            if entry["dropped"]:
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
        out = [(k, v) for k, v in resp_headers
               if k.lower() not in HOP_BY_HOP and (method == "HEAD" or
                                                   k.lower() != "content-length")]
        if method != "HEAD":
            out.append(("Content-Length", str(len(payload))))
        self._reply(status, out, b"" if method == "HEAD" else payload)

    def _reply(self, status: int, headers: list[tuple[str, str]], payload: bytes) -> None:
        self.send_response_only(status)
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        if payload:
            self.wfile.write(payload)
        self.wfile.flush()

    def do_GET(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    proxy = Proxy((host, int(port)), args.config, args.log)
    tmp = args.port_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(str(proxy.server_address[1]))
    os.replace(tmp, args.port_file)
    proxy.serve_forever(poll_interval=0.1)


if __name__ == "__main__":
    main()
