"""Linux process identity: boot id, start ticks, process state (docs/protocols.md §3.2 step 6,
§3.4).

All readers return ``None`` when the process does not exist; other I/O failures raise
:class:`ProcessIdentityError` so a caller never confuses "gone" with "could not tell".
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from qinglong.shared.errors import ProcessIdentityError
from qinglong.shared.handles import ProcessHandle

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def read_boot_id() -> str:
    """Return this machine's current boot id (lowercase UUID text).

    Raises:
        ProcessIdentityError: the file cannot be read.
    """
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError as exc:
        raise ProcessIdentityError("boot id unavailable") from exc


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` this runtime uses.

    ``state`` is the one-letter state (``Z`` zombie, ``X`` dead); ``start_ticks`` is field 22.
    """

    pid: int
    state: str
    ppid: int
    pgid: int
    start_ticks: int


def parse_stat(text: str) -> ProcStat:
    """Parse ``/proc/<pid>/stat`` content; the command name may hold spaces and ``)``.

    Fields are read after the *last* ``)``. Raises ProcessIdentityError on malformed text.
    """
    head, sep, tail = text.rpartition(")")
    if not sep:
        raise ProcessIdentityError("malformed /proc stat")
    try:
        pid = int(head.split("(", 1)[0])
        fields = tail.split()
        # tail starts at field 3 (state); field N is fields[N - 3].
        return ProcStat(
            pid=pid,
            state=fields[0],
            ppid=int(fields[1]),
            pgid=int(fields[2]),
            start_ticks=int(fields[19]),
        )
    except (ValueError, IndexError) as exc:
        raise ProcessIdentityError("malformed /proc stat") from exc


def read_stat(pid: int) -> ProcStat | None:
    """Read ``/proc/<pid>/stat``; ``None`` if no such process.

    Raises:
        ProcessIdentityError: the file exists but cannot be read or parsed.
    """
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    except OSError as exc:
        raise ProcessIdentityError("process stat unreadable") from exc
    return parse_stat(text)


def capture_handle(pid: int) -> ProcessHandle:
    """Capture the exact identity of a live process as a handle.

    Raises:
        ProcessIdentityError: boot id or stat unreadable, process gone or a zombie.
    """
    boot_id = read_boot_id()
    stat = read_stat(pid)
    if stat is None or stat.state in ("Z", "X"):
        raise ProcessIdentityError("process exited before its identity was captured")
    return ProcessHandle(boot_id=boot_id, pid=pid, pgid=stat.pgid, start_ticks=stat.start_ticks)


class Liveness:
    """Verdicts of :func:`probe_handle`."""

    ALIVE = "alive"
    GONE = "gone"
    ZOMBIE = "zombie"
    REGROUPED = "regrouped"


def probe_handle(handle: ProcessHandle, boot_id: str | None = None) -> str:
    """Compare a handle with this machine (docs/protocols.md §3.4 step 3).

    Returns ``"gone"`` for another boot, no such pid, or other start ticks; ``"zombie"`` when
    the exact process is a zombie (it exited and will never publish); ``"regrouped"`` when it
    is the same process but no longer in the handle's process group (insufficient evidence:
    signalling the recorded group would be wrong); else ``"alive"``.
    """
    current_boot = read_boot_id() if boot_id is None else boot_id
    if handle.boot_id != current_boot:
        return Liveness.GONE
    stat = read_stat(handle.pid)
    if stat is None or stat.start_ticks != handle.start_ticks:
        return Liveness.GONE
    if stat.state in ("Z", "X"):
        return Liveness.ZOMBIE
    if stat.pgid != handle.pgid:
        return Liveness.REGROUPED
    return Liveness.ALIVE


def pid_exists(pid: int) -> bool:
    """True when ``/proc/<pid>`` exists (zombies included)."""
    return pid > 0 and os.path.exists(f"/proc/{pid}")
