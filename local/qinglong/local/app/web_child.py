"""``ql3 local serve --web``: the panel as serve's child process (docs/panel.md "Running it").

serve imports nothing of the panel (integration/test_import_closure.py): it checks that the
panel is installed by finding its modules' specs (``importlib.util.find_spec`` loads none of
them), starts ``ql3 local web`` in a child process with the data directory and the listen
address, relays the child's standard output (the one-time sign-in link) to its own, restarts
the child with backoff when it dies, and stops it on shutdown: SIGTERM, then SIGKILL after a
grace.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from typing import IO

#: what ``qinglong[web]`` installs: the panel and the libraries it imports at start
PANEL_MODULES = ("qinglong.panel", "starlette", "jinja2", "uvicorn")
MULTIPART_MODULES = ("python_multipart", "multipart")  # python-multipart, new and old names

STOP_GRACE_S = 5.0  # SIGTERM to SIGKILL at serve's shutdown
FIRST_LINE_WAIT_S = 60.0  # the first start: until the child prints its link or exits
BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 60.0
HEALTHY_S = 60.0  # a child that ran this long restarts after BACKOFF_FIRST_S again

CHILD_ENTRY = "from qinglong.local.app.cli import entry; entry()"


def panel_installed() -> bool:
    """True when ``qinglong[web]``'s modules can be found; imports none of them."""
    def found(name: str) -> bool:
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            return False

    return all(found(m) for m in PANEL_MODULES) and any(found(m) for m in MULTIPART_MODULES)


def next_backoff(previous_s: float | None, ran_s: float) -> float:
    """Seconds before restarting a child that died after running ``ran_s`` seconds:
    BACKOFF_FIRST_S after a healthy run (or the first death), else double the previous
    wait, capped at BACKOFF_CAP_S."""
    if previous_s is None or ran_s >= HEALTHY_S:
        return BACKOFF_FIRST_S
    return min(BACKOFF_CAP_S, previous_s * 2)


class PanelChild:
    """``ql3 local web --data-dir DIR --listen ADDR`` supervised by serve.

    :meth:`start` spawns it and waits for its first line (the sign-in link) or its exit;
    a supervisor thread then restarts it with backoff whenever it exits; :meth:`stop` ends
    it (SIGTERM, SIGKILL after ``grace_s``) and the supervision. Lines the child prints on
    stdout are copied to ``out``; its stderr is serve's. Thread-safe; stop is idempotent
    and callable without start.
    """

    def __init__(self, data_dir: str, listen: str, trusted_proxy: str | None = None, *,
                 out: IO[str] | None = None, err: IO[str] | None = None,
                 grace_s: float = STOP_GRACE_S) -> None:
        self.argv = [sys.executable, "-c", CHILD_ENTRY, "local", "web", "--data-dir",
                     data_dir, "--listen", listen, "--parent-pid", str(os.getpid())]
        if trusted_proxy:
            self.argv += ["--trusted-proxy", trusted_proxy]
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._relays: list[threading.Thread] = []
        self._supervisor: threading.Thread | None = None

    def start(self) -> int | None:
        """Spawn the child and wait until it prints its first line (None: it serves; should
        it die after that, the supervisor restarts it) or exits without a line (its exit
        status; nothing keeps running then)."""
        proc, first_line = self._spawn()
        if proc is None:
            return None
        deadline = time.monotonic() + FIRST_LINE_WAIT_S
        while not first_line.wait(0.1):
            if proc.poll() is not None or time.monotonic() >= deadline:
                break
        if not first_line.is_set() and proc.poll() is not None:
            for relay in self._relays:  # it exited: what it printed is read to the end first
                relay.join(5)
        if not first_line.is_set():
            self._end(proc)
            for relay in self._relays:
                relay.join(5)
            return proc.returncode if proc.returncode not in (None, 0) else 1
        self._supervisor = threading.Thread(target=self._supervise, args=(proc,),
                                            name="ql3-web-supervisor", daemon=True)
        self._supervisor.start()
        return None

    def pid(self) -> int | None:
        """The running child's process id (None when none runs)."""
        with self._lock:
            return self._proc.pid if self._proc is not None and self._proc.poll() is None \
                else None

    def stop(self) -> None:
        """End the child (SIGTERM, then SIGKILL after ``grace_s``) and stop restarting it."""
        self._stopping.set()
        with self._lock:
            proc = self._proc
        if proc is not None:
            self._end(proc)
        if self._supervisor is not None:
            self._supervisor.join(self.grace_s + 5)
        for relay in self._relays:
            relay.join(5)

    def _spawn(self) -> tuple[subprocess.Popen[str] | None, threading.Event]:
        first_line = threading.Event()
        with self._lock:
            if self._stopping.is_set():
                return None, first_line
            proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, text=True, errors="replace")
            self._proc = proc
        relay = threading.Thread(target=self._relay, args=(proc, first_line),
                                 name="ql3-web-relay", daemon=True)
        relay.start()
        self._relays = [t for t in self._relays if t.is_alive()] + [relay]
        return proc, first_line

    def _relay(self, proc: subprocess.Popen[str], first_line: threading.Event) -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                # set before the line is copied: whoever reads the link on serve's stdout
                # (and may stop the child at once) finds the start already counted
                first_line.set()
                try:
                    self.out.write(line)
                    self.out.flush()
                except (OSError, ValueError):  # serve's stdout closed: keep draining
                    pass

    def _supervise(self, proc: subprocess.Popen[str]) -> None:
        started = time.monotonic()
        backoff: float | None = None
        while True:
            status = proc.wait()
            if self._stopping.is_set():
                return
            backoff = next_backoff(backoff, time.monotonic() - started)
            self._say(f"ql3: the web panel exited with status {status}; "
                      f"restarting it in {backoff:g} s")
            if self._stopping.wait(backoff):
                return
            try:
                spawned, _ = self._spawn()
            except OSError as exc:
                self._say(f"ql3: cannot start the web panel: {exc.strerror or exc}")
                started = time.monotonic()
                continue
            if spawned is None:
                return
            proc, started = spawned, time.monotonic()

    def _end(self, proc: subprocess.Popen[str]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _say(self, line: str) -> None:
        try:
            self.err.write(line + "\n")
            self.err.flush()
        except (OSError, ValueError):
            pass
