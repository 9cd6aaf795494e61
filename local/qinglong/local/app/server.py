"""Admission: the Unix-domain socket of ``ql3 local serve`` (docs/protocols.md §3.8).

One JSON request line per connection, one JSON reply line. The socket is 0600 inside the
0700 data directory, and every peer's uid is checked with ``SO_PEERCRED``: only the same
user or root may talk to the server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import struct
import threading
from typing import TYPE_CHECKING, Any

from qinglong.shared.errors import QinglongError, ValidationError

if TYPE_CHECKING:
    from qinglong.local.app.service import LocalService

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1024 * 1024
REQUEST_TIMEOUT_S = 10.0
DRAIN_TIMEOUT_S = 5.0  # a slow client cannot hold the shutdown longer
_UCRED = struct.Struct("3i")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process on the other end of a Unix socket (``SO_PEERCRED``)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    _pid, uid, _gid = _UCRED.unpack(raw)
    return int(uid)


def peer_allowed(uid: int, own_uid: int | None = None) -> bool:
    """Same user as the server, or root."""
    return uid in (os.getuid() if own_uid is None else own_uid, 0)


def error_reply(exc: BaseException) -> dict[str, Any]:
    """A reply for an error: its stable code and its (user-data-free) message."""
    if isinstance(exc, QinglongError):
        usage = isinstance(exc, ValidationError)  # bad input: the client exits 2
        return {"ok": False, "error": {"code": exc.code, "message": str(exc), "usage": usage}}
    return {"ok": False, "error": {"code": "internal_error", "message": "internal error"}}


class _Handler(socketserver.StreamRequestHandler):
    server: _Server
    timeout = REQUEST_TIMEOUT_S  # a silent client cannot hold a handler (or the drain)

    def handle(self) -> None:
        if not peer_allowed(peer_uid(self.connection)):
            self._reply({"ok": False, "error": {"code": "forbidden",
                                                "message": "peer uid not allowed"}})
            return
        try:
            line = self.rfile.readline(MAX_REQUEST_BYTES + 1)
        except OSError:  # the client went silent past the timeout or vanished
            return
        try:
            if len(line) > MAX_REQUEST_BYTES:
                raise ValueError("request too large")
            request = json.loads(line)
            op, args = str(request["op"]), dict(request.get("args") or {})
        except (ValueError, KeyError, TypeError):
            self._reply({"ok": False, "error": {"code": "bad_request",
                                                "message": "malformed request"}})
            return
        # here: client.py imports this module, and a client loads no service
        from qinglong.local.app.ops import call

        try:
            self._reply({"ok": True, "result": call(self.server.service, op, args)})
        except QinglongError as exc:
            self._reply(error_reply(exc))
        except Exception:
            log.exception("operation %s failed", op)
            self._reply(error_reply(RuntimeError()))

    def _reply(self, obj: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            self.wfile.write(json.dumps(obj).encode() + b"\n")


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False  # the drain below is bounded instead
    allow_reuse_address = False
    # socketserver's default backlog is 5; a burst of connections beyond it (twenty log views
    # opening at once) is refused at once with EAGAIN by a client with a timeout
    request_queue_size = 128

    def __init__(self, path: str, service: LocalService) -> None:
        self.service = service
        self.in_flight = 0
        self.idle = threading.Condition()
        super().__init__(path, _Handler, bind_and_activate=False)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self.idle:
            self.in_flight += 1
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.idle:
                self.in_flight -= 1
                self.idle.notify_all()


class SocketServer:
    """Serves :func:`ops.call` on ``path``. ``start`` binds (0600) and serves in a thread;
    ``stop`` stops accepting, waits for the serving thread and removes the socket file."""

    def __init__(self, path: str, service: LocalService) -> None:
        self.path = path
        self._server = _Server(path, service)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Bind and listen. A stale socket file (no server behind it) is replaced."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # the caller holds the owner lock: nobody else serves here
        old = os.umask(0o177)
        try:
            self._server.server_bind()
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self._server.server_activate()
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
            name="ql3-admission", daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Admission drain: stop accepting and finish the requests in flight (idempotent)."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
            with self._server.idle:  # requests in flight finish, within a bound
                self._server.idle.wait_for(lambda: self._server.in_flight == 0,
                                           timeout=DRAIN_TIMEOUT_S)
        self._server.server_close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
