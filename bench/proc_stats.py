"""Per-process figures read from /proc, shared by the local benches (not a test)."""

from __future__ import annotations

import os

TICK_S = os.sysconf("SC_CLK_TCK")
"""Clock ticks per second (``/proc/<pid>/stat`` times are in ticks)."""


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (``VmRSS``). Raises OSError, RuntimeError."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_ticks(pid: int) -> int:
    """User + system CPU of ``pid`` in clock ticks (``/proc/<pid>/stat`` fields 14, 15)."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def cpu_s(pid: int) -> float:
    """User + system CPU of ``pid`` in seconds."""
    return cpu_ticks(pid) / TICK_S
