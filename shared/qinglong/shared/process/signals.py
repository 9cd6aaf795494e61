"""The signal guard: the only place this runtime sends signals (docs/protocols.md §3.2 step 6,
§3.3).

No code path signals a pid or group id <= 1: ``killpg(0)`` hits the caller's own group and
``kill(-1)`` every process the caller may signal. Graceful signals go to one exact process
through a pidfd when one is held, so a reused pid is never hit.
"""

from __future__ import annotations

import os
import signal

from qinglong.shared.errors import UnsafeSignalError

GRACEFUL_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


def _check(target: int, what: str) -> None:
    if type(target) is not int or target <= 1:
        raise UnsafeSignalError(f"refusing to signal {what} <= 1")
    if what == "process group" and target == os.getpgrp():
        raise UnsafeSignalError("refusing to signal this runtime's own process group")


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to process group ``pgid``.

    Returns False if the group no longer exists. Raises UnsafeSignalError for pgid <= 1 or
    the caller's own group; other OSErrors propagate.
    """
    _check(pgid, "process group")
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def signal_process(pid: int, sig: int, pidfd: int | None = None) -> bool:
    """Send ``sig`` to one process, through ``pidfd`` when given.

    Returns False if the process is gone. Raises UnsafeSignalError for pid <= 1.
    """
    _check(pid, "pid")
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def group_exists(pgid: int) -> bool:
    """True while any process of group ``pgid`` exists (signal 0 probe; zombies count)."""
    _check(pgid, "process group")
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
