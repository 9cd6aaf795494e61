"""Helpers for qinglong.local.process tests (imported by name: not a conftest)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from qinglong.local.process.launch_request import LaunchConfig, LaunchRequest
from qinglong.local.process.launcher import LocalProcessLauncher
from qinglong.shared.ids import uuid7
from qinglong.shared.process.signals import group_exists


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``predicate`` every 10 ms until true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            return fh.read().rpartition(")")[2].split()
    except OSError:
        return None


def reap_orphans(pgid: int) -> None:
    """Reap zombie children of this process that belong to group ``pgid`` (adopted orphans)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields and fields[0] == "Z" and int(fields[1]) == os.getpid() and int(fields[2]) == pgid:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(int(entry), os.WNOHANG)


def group_gone(pgid: int, timeout: float = 5.0) -> bool:
    """True once no process (zombies included) of group ``pgid`` remains."""

    def gone() -> bool:
        reap_orphans(pgid)
        return not group_exists(pgid)

    return wait_until(gone, timeout)


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@dataclass
class FakeJournal:
    """In-memory ReceiptJournal: records calls; raises ``error`` if set; runs ``hook``."""

    calls: list[tuple[str, str, str]] = field(default_factory=list)
    error: Exception | None = None
    hook: Callable[[], None] | None = None

    def register(self, run_id: str, attempt_id: str, receipt_path: str) -> None:
        if self.hook is not None:
            self.hook()
        if self.error is not None:
            raise self.error
        self.calls.append((run_id, attempt_id, receipt_path))


@dataclass
class Env:
    """One test's launch environment under tmp_path."""

    tmp: Path
    journal: FakeJournal
    log_root: Path
    receipt_root: Path
    cwd: Path
    marker: Path
    spawned: list[subprocess.Popen[bytes]]

    def config(self, **overrides: object) -> LaunchConfig:
        values: dict[str, object] = {
            "log_root": str(self.log_root),
            "receipt_root": str(self.receipt_root),
        }
        values.update(overrides)
        return LaunchConfig(**values)

    def launcher(self, **overrides: object) -> LocalProcessLauncher:
        return LocalProcessLauncher(self.config(**overrides), self.journal)

    def request(
        self,
        argv: tuple[str, ...] | None = None,
        env: dict[str, str] | None = None,
        **overrides: object,
    ) -> LaunchRequest:
        values: dict[str, object] = {
            "run_id": uuid7(),
            "attempt_id": uuid7(),
            "argv": argv if argv is not None else ("touch", str(self.marker)),
            "env": env if env is not None else {"PATH": os.environ["PATH"]},
            "cwd": str(self.cwd),
            "output_path": str(self.log_root / "task" / "attempt.log"),
        }
        values.update(overrides)
        return LaunchRequest(**values)


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process whose process group is ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and int(fields[2]) == pgid:
                members.append((int(entry), fields[0]))
    return members


def reap_child(pid: int, timeout: float = 5.0) -> int | None:
    """Wait (polling) for child ``pid`` to exit; its exit code or -signal, None on timeout."""
    result: list[int] = []

    def done() -> bool:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            result.append(os.waitstatus_to_exitcode(status))
        return bool(result)

    return result[0] if wait_until(done, timeout) else None


def file_mode(path: str | Path) -> int:
    return os.lstat(path).st_mode & 0o7777
