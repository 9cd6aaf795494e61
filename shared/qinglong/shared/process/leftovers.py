"""Stop what an attempt left behind once its leader is gone (issue 10 item 5, issue 11 item 6,
case C18). Profile-neutral: the local coordinator and the remote worker both use it.

One rule for every exit — success, failure, timeout, cancel, a re-attached wrapper, a run
settled from its receipt after a restart, a remote attempt ended or killed (docs/protocols.md §3.3,
§3.4, §4.2):

1. find the leftovers: live members of the attempt's process group (only while the group id
   is pinned by our unreaped wrapper, so it cannot be another group) and every process
   holding the attempt lock (``setsid`` escapees included), see ``lock_holders.py``;
2. pin each one with a pidfd and re-check its start time, so a reused pid is never hit;
   never pid <= 1, this process, or a process of this runtime's own group;
3. TERM each, wait up to the grace period for them to exit and the lock to free;
4. KILL those still alive (and the pinned group), looking again for new holders, a few
   rounds; then probe the lock: free → ``leftovers_stopped``, still held (its holders cannot
   be found: another PID namespace, an fd in flight on a socket) → ``leftovers_unresolved``.

The caller records the report as an event (:meth:`LeftoverReport.event`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from qinglong.shared.errors import ProcessIdentityError, QinglongError
from qinglong.shared.process.identity import read_stat
from qinglong.shared.process.lock_holders import group_members
from qinglong.shared.process.signals import signal_group, signal_process

KILL_ROUNDS = 3
KILL_WAIT_S = 2.0  # per round: a SIGKILLed process is gone in microseconds unless loaded
POLL_S = 0.05
STOPPED = "leftovers_stopped"
UNRESOLVED = "leftovers_unresolved"


class AttemptLockPort(Protocol):
    """The attempt lock as this module needs it (a port: each profile adapts its own lock
    file, and tests may fake it)."""

    def held(self) -> bool:
        """True while any process holds the lock. May raise OSError or QinglongError."""

    def holders(self) -> list[int]:
        """Pids found holding the lock file open ([] when none can be found)."""


@dataclass(frozen=True, slots=True)
class LeftoverReport:
    """What :func:`stop_leftovers` found and did.

    ``found``: processes found alive after the leader exited (``in_group`` of them still in
    its process group, the rest escaped it); ``killed``: how many of them needed SIGKILL
    after the grace period; ``unresolved``: the lock is still held at the end (its holders
    could not be found or stopped); ``grace_s``: the grace period used, in seconds.
    """

    found: int = 0
    in_group: int = 0
    killed: int = 0
    unresolved: bool = False
    grace_s: float = 0.0

    def describe(self) -> str:
        """One log line, e.g. ``1 process left behind: stopped (1 needed SIGKILL)``."""
        text = f"{self.found} process(es) left behind"
        if self.unresolved:
            return text + ("; the attempt lock is still held and its holders cannot be "
                           "found or stopped")
        return text + f": stopped ({self.killed} needed SIGKILL)"

    def event(self) -> tuple[str, dict[str, object]] | None:
        """``(kind, detail)`` to record, or None when nothing was left behind."""
        if not (self.found or self.unresolved):
            return None
        detail: dict[str, object] = {
            "found": self.found, "in_group": self.in_group,
            "escaped": self.found - self.in_group, "killed": self.killed,
            "grace_s": self.grace_s,
        }
        if self.unresolved:
            detail["lock"] = "held"
        return (UNRESOLVED if self.unresolved else STOPPED), detail


class _Pinned:
    """One leftover process, addressed through a pidfd whose identity was re-checked."""

    def __init__(self, pid: int, pgid: int, pidfd: int) -> None:
        self.pid, self.pgid, self.pidfd = pid, pgid, pidfd
        self.exited = False

    @classmethod
    def pin(cls, pid: int) -> _Pinned | None:
        """Pin ``pid`` if it is a live process this runtime may signal, else None."""
        if pid <= 1 or pid == os.getpid():
            return None
        try:
            before = read_stat(pid)
            if before is None:
                return None
            pidfd = os.pidfd_open(pid)
        except (ProcessIdentityError, OSError):
            return None
        try:
            after = read_stat(pid)  # the pidfd now pins the pid: same start time, same one
        except ProcessIdentityError:
            after = None
        if (after is None or after.start_ticks != before.start_ticks
                or after.state in ("Z", "X") or after.pgid == os.getpgrp()):
            os.close(pidfd)
            return None
        return cls(pid, after.pgid, pidfd)

    def gone(self) -> bool:
        """True once the process has exited (zombies count: they hold no lock)."""
        if not self.exited and select.select([self.pidfd], [], [], 0)[0]:
            self.exited = True
        return self.exited

    def send(self, sig: int) -> bool:
        """Signal through the pidfd; False if it is already gone."""
        if self.gone():
            return False
        try:
            return signal_process(self.pid, sig, pidfd=self.pidfd)
        except (QinglongError, OSError):
            return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.pidfd)


def stop_leftovers(
    lock: AttemptLockPort,
    *,
    pgid: int | None,
    grace_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> LeftoverReport:
    """After the attempt's leader is gone, stop what is left (see the module docstring).

    ``pgid``: the attempt's process group, only while the caller pins it (its leader is our
    unreaped child); None otherwise (then only lock holders are addressed). ``grace_s``:
    seconds between TERM and KILL (the profile's grace). Never raises: a lock that cannot
    be probed counts as held.
    """
    pinned: dict[int, _Pinned] = {}
    try:
        _discover(lock, pgid, pinned)
        if not pinned and not _held(lock):
            return LeftoverReport(grace_s=grace_s)
        for proc in list(pinned.values()):  # docs/protocols.md §3.3: TERM first, then the grace
            proc.send(signal.SIGTERM)
        _wait(lock, pinned, clock() + grace_s, clock)
        killed: set[int] = set()
        for _ in range(KILL_ROUNDS):
            _discover(lock, pgid, pinned)
            alive = [p for p in pinned.values() if not p.gone()]
            if not alive:
                break  # nothing (more) to signal: the lock is free, or its holders unknown
            for proc in alive:
                if proc.send(signal.SIGKILL):
                    killed.add(proc.pid)
            if pgid is not None:
                with contextlib.suppress(QinglongError, OSError):
                    signal_group(pgid, signal.SIGKILL)
            if _wait(lock, pinned, clock() + KILL_WAIT_S, clock):
                break
        in_group = sum(1 for p in pinned.values() if pgid is not None and p.pgid == pgid)
        return LeftoverReport(found=len(pinned), in_group=in_group, killed=len(killed),
                              unresolved=_held(lock), grace_s=grace_s)
    finally:
        for proc in pinned.values():
            proc.close()


def _discover(lock: AttemptLockPort, pgid: int | None, pinned: dict[int, _Pinned]) -> None:
    pids: list[int] = []
    with contextlib.suppress(OSError):
        if pgid is not None and pgid > 1:
            pids.extend(group_members(pgid))
        pids.extend(lock.holders())
    for pid in pids:
        if pid not in pinned:
            proc = _Pinned.pin(pid)
            if proc is not None:
                pinned[pid] = proc


def _held(lock: AttemptLockPort) -> bool:
    try:
        return lock.held()
    except (OSError, QinglongError):
        return True  # cannot tell: never "done"


def _wait(
    lock: AttemptLockPort, pinned: dict[int, _Pinned], deadline: float,
    clock: Callable[[], float],
) -> bool:
    """Poll until every pinned process is gone and the lock is free (True), or deadline."""
    while True:
        if all(p.gone() for p in pinned.values()) and not _held(lock):
            return True
        if clock() >= deadline:
            return False
        time.sleep(POLL_S)
