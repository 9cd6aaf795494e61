"""Harness for the integration tier: real `ql3` processes on a temporary data directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qinglong.local.app.client import SocketBackend
from qinglong.shared.errors import QinglongError

# QL3_BIN: another build's `ql3` (say, an old checkout's .venv/bin/ql3, to show a test fails
# there); default: the `ql3` of the venv running the tests
QL3 = os.environ.get("QL3_BIN") or str(Path(sys.executable).parent / "ql3")


class Ql3:
    """Runs the real `ql3` command line against one data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.env = dict(os.environ, QL3_DATA_DIR=str(data_dir))
        self.env.pop("PYTHONPATH", None)

    def run(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [QL3, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"ql3 {args} exited {proc.returncode}: {proc.stderr}")
        return proc

    def json(self, *args: str, check: bool = True) -> Any:
        """Run with ``--json`` appended and parse stdout (``check=False``: any exit code)."""
        return json.loads(self.run(*args, "--json", check=check).stdout)

    def start_serve(self, *extra: str) -> subprocess.Popen[str]:
        """Start `ql3 local serve`; its output goes to ``serve.log`` beside the data dir."""
        log_path = self.data_dir.parent / "serve.log"
        with open(log_path, "a") as log:
            proc = subprocess.Popen(
                [QL3, "local", "serve", *extra], env=self.env, stdout=log, stderr=log, text=True,
            )
        sock = self.data_dir / "ql3.sock"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"serve exited {proc.returncode}: {log_path.read_text()}")
            # this serve answers on its socket (a file left by a killed predecessor does
            # not): only then are its signal handlers installed and its recovery done. The
            # request `ql3 local recovery status` sends, sent from here (no process start)
            if SocketBackend.probe(str(sock)) and _answers_recovery_status(sock):
                return proc
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        raise AssertionError("serve did not come up")

    def serve_log(self) -> str:
        """What the serve processes of this data directory printed."""
        path = self.data_dir.parent / "serve.log"
        return path.read_text() if path.exists() else ""

    @staticmethod
    def stop_serve(proc: subprocess.Popen[str], timeout: float = 30) -> int:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        finally:
            if proc.poll() is None:
                proc.kill()


def _answers_recovery_status(sock: Path) -> bool:
    try:
        SocketBackend(str(sock)).call("recovery_status")
    except (QinglongError, OSError, ValueError):
        return False
    return True


@pytest.fixture(scope="session")
def initialised_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory made once per session by the real ``ql3 local init --profile
    standalone``; never used itself, only copied (``ql3``). Nothing in it names its own path
    (the SQLite database, the lock file, the empty logs and receipts trees)."""
    data = tmp_path_factory.mktemp("initialised") / "data"
    Ql3(data).run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    return data


@pytest.fixture
def ql3(tmp_path: Path, initialised_data_dir: Path) -> Iterator[Ql3]:
    """An initialised data directory (a copy of ``initialised_data_dir``, modes kept: the same
    files ``ql3 local init`` makes, without a process start per test) and a runner for `ql3`
    against it."""
    data = tmp_path / "data"
    shutil.copytree(initialised_data_dir, data, symlinks=True)
    return Ql3(data)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(predicate: Any, timeout: float, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def alive_in_group(pgid: int) -> list[int]:
    """Pids of non-zombie processes whose process group is ``pgid`` (a zombie holds no lock
    and cannot be stopped: an orphan reparented to a test process that never reaps it
    counts as gone)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found
