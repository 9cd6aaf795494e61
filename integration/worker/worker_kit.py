"""Process-group probes for the worker tests (non-zombie members of a group)."""

from __future__ import annotations

import os
import time


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
