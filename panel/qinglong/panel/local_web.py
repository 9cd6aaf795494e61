"""``ql3 local web``: the panel for the local profile in its own process (docs/panel.md).

A client of the owner (``ql3 local serve``) over the data directory's socket: it never opens
``ql3.db`` nor takes ``ql3.lock``. Prints a one-time sign-in link on start.
"""

from __future__ import annotations

import getpass
import os
import signal
import socket
import sys

import uvicorn

from qinglong.panel import password
from qinglong.panel.app import create_app
from qinglong.panel.local_backend import LocalPanelBackend
from qinglong.panel.proxies import parse_trusted
from qinglong.panel.security import Sessions


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port). Raises ValueError."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("--listen takes HOST:PORT, e.g. 127.0.0.1:5700")
    return host.strip("[]"), int(port)


def main(socket_path: str, listen: str, set_password: bool = False,
         trusted_proxy: str | None = None) -> int:
    """`ql3 local web`'s body: :func:`serve` (or :func:`set_password_file` with
    ``set_password``), with a bad ``listen`` or ``trusted_proxy``, a non-loopback listen
    without a password, or a bad password file as exit 2 and a failed bind as exit 1, one
    line on stderr each. The password file is ``panel-password`` beside the socket (the
    data directory); ``trusted_proxy``: ``ADDR[,ADDR]`` (:mod:`qinglong.panel.proxies`)."""
    password_path = os.path.join(os.path.dirname(socket_path), password.FILE_NAME)
    try:
        if set_password:
            return set_password_file(password_path)
        return serve(socket_path, listen, password_path, trusted_proxy)
    except ValueError as exc:
        print(f"ql3: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"ql3: error: cannot listen on {listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1


def set_password_file(path: str) -> int:
    """Ask for the password (twice on a terminal; one line on stdin otherwise), store its
    scrypt hash at ``path`` (0600); exit 0. Raises PasswordError (a ValueError)."""
    if sys.stdin.isatty():
        first = getpass.getpass("panel password: ")
        if getpass.getpass("again: ") != first:
            raise password.PasswordError("the two passwords differ")
    else:
        first = sys.stdin.readline().rstrip("\n")
    password.write(path, password.hash_password(first))
    print("ql3: panel password set; sessions signed in before keep working until the "
          "panel restarts", flush=True)
    return 0


def serve(socket_path: str, listen: str, password_path: str | None = None,
          trusted_proxy: str | None = None) -> int:
    """Bind ``listen``, print the sign-in link on stdout, serve until SIGINT/SIGTERM; the
    exit status. Raises ValueError for a bad ``listen``, a bad ``trusted_proxy`` or a
    non-loopback listen without a password (PasswordError for an unsafe password file),
    OSError when it cannot bind."""
    host, port = parse_listen(listen)
    trusted = parse_trusted(trusted_proxy)
    stored = password.read(password_path) if password_path else None
    if stored is None and not password.is_loopback(host):
        raise ValueError(f"listening on {host} (not loopback) needs a password: run "
                         "`ql3 local web --set-password` first")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    sessions = Sessions()
    app = create_app(LocalPanelBackend(socket_path), sessions, stored, trusted)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"ql3 panel: open http://{shown}:{bound}/signin?token={sessions.sign_in_token}",
          flush=True)
    print("(the link signs in once; start it again for a new one)", flush=True)
    # proxy_headers off: only the panel's own middleware reads X-Forwarded-* (proxies.py)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=2, proxy_headers=False)
    server = uvicorn.Server(config)
    # uvicorn stops gracefully on SIGINT/SIGTERM, then re-raises the signal with the handlers
    # it found: these make that a clean exit 0 (docs/panel.md "Running it")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_cleanly)
    server.run(sockets=[sock])
    sys.stdout.flush()
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
