"""The owner's socket admits a burst of clients (docs/protocols.md §3.8): twenty panel log
views opening at once must each get a connection, not "no ql3 serve answers"."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from qinglong.local.app import client as client_mod
from qinglong.local.app.client import ServerUnavailableError, SocketBackend
from qinglong.local.app.server import SocketServer


def _connect(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)  # as the client does: a full backlog answers EAGAIN at once
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        raise
    return sock


def test_the_listen_backlog_holds_a_burst_of_forty_connections(tmp_path: Path) -> None:
    path = str(tmp_path / "ql3.sock")
    server = SocketServer(path, service=None)  # type: ignore[arg-type]  # never called
    inner: Any = server._server
    inner.server_bind()
    inner.server_activate()  # listening, but nothing accepts: every connection waits
    opened: list[socket.socket] = []
    try:
        for _ in range(40):
            opened.append(_connect(path))
        assert len(opened) == 40
    finally:
        for sock in opened:
            sock.close()
        inner.server_close()


def test_the_client_waits_for_room_in_a_full_backlog(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    filler: list[socket.socket] = []
    while True:  # fill the backlog until a connect is refused with EAGAIN
        try:
            filler.append(_connect(path))
        except BlockingIOError:
            break
    room = threading.Event()

    def serve_one() -> None:
        room.wait(30)
        for _ in range(len(filler)):  # take the waiting ones: room for the client
            listener.accept()[0].close()
        conn, _ = listener.accept()
        with conn:
            conn.makefile("rb").readline()
            conn.sendall(b'{"ok": true, "result": {"pong": true}}\n')

    server = threading.Thread(target=serve_one, daemon=True)
    server.start()
    real_sleep = client_mod.time.sleep

    def sleep(seconds: float) -> None:  # the client retries: now make room
        room.set()
        real_sleep(seconds)

    monkeypatch.setattr(client_mod.time, "sleep", sleep)
    try:
        assert SocketBackend(path).call("ping") == {"pong": True}
        assert room.is_set()  # it did meet the full backlog first
    finally:
        room.set()
        server.join(10)
        for sock in filler:
            sock.close()
        listener.close()


def test_no_listener_is_still_unavailable_at_once(tmp_path: Path) -> None:
    with pytest.raises(ServerUnavailableError):
        SocketBackend(str(tmp_path / "none.sock")).call("ping")
