"""The client side of the serve socket, and the direct (no-serve) backend."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from typing import TYPE_CHECKING, Any

from qinglong.local.app.server import MAX_REQUEST_BYTES
from qinglong.shared.errors import NotFoundError, QinglongError, ValidationError

if TYPE_CHECKING:
    from qinglong.local.app.service import LocalService

CONNECT_TIMEOUT_S = 5.0
REPLY_TIMEOUT_S = 60.0


class RemoteError(QinglongError):
    """An error the server replied with; ``code`` is the server's stable code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class RemoteValidationError(ValidationError):
    """The server refused the input (bad input: the command exits 2 as it would locally)."""

    def __init__(self, message: str) -> None:
        QinglongError.__init__(self, message)
        self.field = "request"


class RemoteNotFoundError(NotFoundError):
    """The server found no such task or run (the command exits 2 as it would locally)."""


class ServerUnavailableError(QinglongError):
    """No server answers on the socket."""

    code = "server_unavailable"


class SocketBackend:
    """Sends operations to a running ``serve``."""

    remote = True

    def __init__(self, path: str) -> None:
        self.path = path

    def call(self, op: str, **args: Any) -> Any:
        """One request/reply. Raises RemoteError or ServerUnavailableError, and
        RemoteValidationError ``request: larger than …`` before sending a request over the
        server's MAX_REQUEST_BYTES (docs/panel.md "Large fields")."""
        line = json.dumps({"op": op, "args": args}).encode() + b"\n"
        if len(line) > MAX_REQUEST_BYTES:
            raise RemoteValidationError(
                f"request: larger than the {MAX_REQUEST_BYTES} bytes the server takes")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(CONNECT_TIMEOUT_S)
            _connect(sock, self.path)
            sock.settimeout(REPLY_TIMEOUT_S)
            with contextlib.suppress(BrokenPipeError):  # a refusal may come before we finish
                sock.sendall(line)
            try:
                reply = sock.makefile("rb").readline()
            except ConnectionResetError:  # the owner stopped serving (it ended) meanwhile
                reply = b""
        finally:
            sock.close()
        if not reply:
            raise ServerUnavailableError("the server closed the connection")
        obj = json.loads(reply)
        if not obj.get("ok"):
            err = obj.get("error") or {}
            if err.get("usage"):
                raise RemoteValidationError(str(err.get("message")))
            if err.get("code") == NotFoundError.code:
                raise RemoteNotFoundError(str(err.get("message")))
            raise RemoteError(str(err.get("code")), str(err.get("message")))
        return obj["result"]

    @staticmethod
    def probe(path: str) -> bool:
        """True when a server answers ``ping`` on ``path``."""
        try:
            SocketBackend(path).call("ping")
        except (QinglongError, OSError, ValueError):
            return False
        return True


def _connect(sock: socket.socket, path: str) -> None:
    """Connect within CONNECT_TIMEOUT_S. A full listen backlog answers a socket with a
    timeout EAGAIN at once (not a wait): that is retried until the deadline, so a burst of
    clients waits its turn instead of reading "no server". Raises ServerUnavailableError."""
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            sock.connect(path)
            return
        except BlockingIOError as exc:
            if time.monotonic() >= deadline:
                raise ServerUnavailableError("no ql3 serve answers on the socket") from exc
            time.sleep(0.02)
        except OSError as exc:
            raise ServerUnavailableError("no ql3 serve answers on the socket") from exc


class DirectBackend:
    """Runs operations in this process (the command owns the data directory)."""

    remote = False

    def __init__(self, service: LocalService) -> None:
        self.service = service

    def call(self, op: str, **args: Any) -> Any:
        """Run ``op`` here; JSON round trip so results match the socket's exactly."""
        from qinglong.local.app.ops import call

        return json.loads(json.dumps(call(self.service, op, args)))
