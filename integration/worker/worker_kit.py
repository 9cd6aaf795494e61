"""Process probes for the worker tests: non-zombie members of a group, processes by their
exact command line."""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable


def live_members(pgid: int) -> list[int]:
    """Non-zombie pids in process group ``pgid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as fh:
                fields = fh.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(name))
    return found


def wait_group_gone(pgid: int, timeout_s: float) -> float:
    """Monotonic time at which the group had no live member; AssertionError after timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not live_members(pgid):
            return time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"group {pgid} still alive: {live_members(pgid)}")


def unique_sleep() -> str:
    """A ``sleep`` argument no other process on the host uses (300 s plus a random fraction),
    so a test can find exactly its own sleeper in /proc."""
    return f"300.{secrets.randbelow(10**9):09d}"


def pids_running(argv: list[str]) -> list[int]:
    """Non-zombie pids whose command line is exactly ``argv``."""
    wanted = b"\0".join(a.encode() for a in argv) + b"\0"
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{name}/stat") as fh:
                state = fh.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if cmdline == wanted and state not in ("Z", "X"):
            found.append(int(name))
    return found


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Monotonic time at which ``predicate()`` first held; AssertionError after timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"{what}: not within {timeout_s} s")
