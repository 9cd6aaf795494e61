"""``ql3 local web``: the panel for the local profile in its own process (docs/panel.md).

A client of the owner (``ql3 local serve``) over the data directory's socket: it never opens
``ql3.db`` nor takes ``ql3.lock``. Prints a one-time sign-in link on start.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import json
import os
import secrets
import signal
import socket
import sys
import time

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
         trusted_proxy: str | None = None, new_link: bool = False) -> int:
    """`ql3 local web`'s body: :func:`serve` (or :func:`set_password_file` with
    ``set_password``), with a bad ``listen`` or ``trusted_proxy``, a non-loopback listen
    without a password, a bad password file or another panel running on the data directory
    (:func:`_hold_panel_lock`) as exit 2 and a failed bind as exit 1, one
    line on stderr each. The password file is ``panel-password`` beside the socket (the
    data directory); ``trusted_proxy``: ``ADDR[,ADDR]`` (:mod:`qinglong.panel.proxies`).
    ``new_link``: :func:`print_new_link` instead (exit 1 when no panel answers)."""
    password_path = os.path.join(os.path.dirname(socket_path), password.FILE_NAME)
    try:
        if new_link:
            return print_new_link(os.path.dirname(socket_path))
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
    non-loopback listen without a password or another panel on the data directory
    (PasswordError for an unsafe password file), OSError when it cannot bind."""
    host, port = parse_listen(listen)
    trusted = parse_trusted(trusted_proxy)
    stored = password.read(password_path) if password_path else None
    if stored is None and not password.is_loopback(host):
        raise ValueError(f"listening on {host} (not loopback) needs a password: run "
                         "`ql3 local web --set-password` first")
    data_dir = os.path.dirname(socket_path)
    held = _hold_panel_lock(data_dir)  # open until this process ends
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    bound = sock.getsockname()[1]
    sessions = Sessions()
    app = create_app(LocalPanelBackend(socket_path), sessions, stored, trusted)
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    base = f"http://{shown}:{bound}"
    signal.signal(signal.SIGUSR1, lambda signum, frame: _take_link_token(data_dir, sessions))
    _write_private(os.path.join(data_dir, RUNNING_FILE), json.dumps(
        {"pid": os.getpid(), "base": base}))
    print(f"ql3 panel: open {base}/signin?token={sessions.sign_in_token}", flush=True)
    print("(the link signs in once; `ql3 local web --new-link` prints a new one)", flush=True)
    # proxy_headers off: only the panel's own middleware reads X-Forwarded-* (proxies.py)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=2, proxy_headers=False)
    server = uvicorn.Server(config)
    # uvicorn stops gracefully on SIGINT/SIGTERM, then re-raises the signal with the handlers
    # it found: these make that a clean exit 0 (docs/panel.md "Running it")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _exit_cleanly)
    try:
        server.run(sockets=[sock])
    finally:
        _remove(os.path.join(data_dir, RUNNING_FILE))
        os.close(held)
    sys.stdout.flush()
    return 0


# new-link: `ql3 local web --new-link` asks the running panel for a new one-time sign-in
# link (docs/panel.md "Running it"). The panel writes RUNNING_FILE (its pid and address,
# 0600) in the data directory; the command writes a fresh token to LINK_FILE (0600) and
# sends the panel SIGUSR1; the panel takes the token (removing the file) as its one-time
# token, replacing any unused one. Only the data directory's owner can do either.
RUNNING_FILE = "panel-web.json"
LINK_FILE = "panel-link-token"
# one panel per data directory (docs/panel.md "Running it"): a panel holds an exclusive
# flock on LOCK_FILE while it runs (the kernel drops it when the process ends, however it
# ends); a second one is refused before it binds, so it never touches the first's
# RUNNING_FILE
LOCK_FILE = "panel-web.lock"


def _hold_panel_lock(data_dir: str) -> int:
    """LOCK_FILE's descriptor (0600) with an exclusive flock taken; raises ValueError naming
    the running panel's address (from RUNNING_FILE) when another panel holds it."""
    fd = os.open(os.path.join(data_dir, LOCK_FILE),
                 os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ValueError(f"a panel already runs on this data directory"
                         f"{_running_at(data_dir)}; stop it first, or run `ql3 local web "
                         "--new-link` for a sign-in link to it") from None
    return fd


def _running_at(data_dir: str) -> str:
    """`` at BASE`` of the running panel (RUNNING_FILE), or "" when it is unreadable."""
    try:
        with open(os.path.join(data_dir, RUNNING_FILE)) as found:
            return f" at {json.load(found)['base']!s}"
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def _write_private(path: str, text: str) -> None:
    """``text`` to ``path`` created anew with mode 0600 (an existing file is replaced)."""
    _remove(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _take_link_token(data_dir: str, sessions: Sessions) -> None:
    """SIGUSR1: the token in LINK_FILE (removed) becomes the one-time sign-in token; a
    missing or odd file changes nothing."""
    path = os.path.join(data_dir, LINK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return
    with os.fdopen(fd) as given:
        token = given.read(100).strip()
    _remove(path)
    if 32 <= len(token) <= 64 and token.replace("-", "").replace("_", "").isalnum():
        sessions.set_link_token(token)


def print_new_link(data_dir: str, wait_s: float = 5.0) -> int:
    """Print a new one-time sign-in link of the panel running on ``data_dir`` (exit 0), or
    say on stderr that none runs or it did not take the link in ``wait_s`` s (exit 1)."""
    try:
        with open(os.path.join(data_dir, RUNNING_FILE)) as found:
            running = json.load(found)
        pid, base = int(running["pid"]), str(running["base"])
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:  # never signal a reused pid
            alive = b"web" in cmdline.read()
    except (OSError, ValueError, KeyError, TypeError):
        alive = False
    if not alive:
        print("ql3: error: no panel runs on this data directory; start it with "
              "`ql3 local web` (or `ql3 local serve --web`), which prints a link",
              file=sys.stderr)
        return 1
    token = secrets.token_urlsafe(32)
    path = os.path.join(data_dir, LINK_FILE)
    _write_private(path, token)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + wait_s
    while os.path.exists(path):
        if time.monotonic() > deadline:
            _remove(path)
            print("ql3: error: the panel did not take the new link; restart it", file=sys.stderr)
            return 1
        time.sleep(0.05)
    print(f"ql3 panel: open {base}/signin?token={token}", flush=True)
    print("(the link signs in once; an older unused link no longer works)", flush=True)
    return 0


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
