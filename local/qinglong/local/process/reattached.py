"""A wrapper from an earlier owner, supervised again after a restart (docs/protocols.md §3.4 step
3).

It is not our child: its exit status cannot be collected, so only its completion receipt
tells how the user command ended (none → ``lost``). Exit is observed through a pidfd, and
the identity is re-checked after the pidfd is open, so a reused pid is never adopted.
"""

from __future__ import annotations

import os
import select
import signal

from qinglong.shared.errors import ProcessIdentityError, QinglongError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.identity import Liveness, probe_handle
from qinglong.shared.process.signals import GRACEFUL_SIGNALS, signal_group, signal_process

EXITED = 0  # what ``wait`` returns once the process is gone (its status is unknowable)


class ProcessGoneError(QinglongError):
    """The handle's process no longer exists (or is another process now)."""

    code = "process_gone"


class ReattachedProcess:
    """Supervision of an existing wrapper by its durable handle.

    Same surface as ``LaunchedProcess`` for the coordinator's monitor: ``handle``,
    ``pid``, ``wait``, ``returncode`` (always None), ``send_graceful``, ``kill_group``,
    ``close``. Raises ProcessGoneError at construction when the exact process is gone.
    """

    def __init__(self, handle: ProcessHandle) -> None:
        self.handle = handle
        try:
            self._pidfd = os.pidfd_open(handle.pid)
        except ProcessLookupError:
            raise ProcessGoneError("the process of the handle is gone") from None
        try:
            verdict = probe_handle(handle)  # after the pidfd pins the pid: no reuse race
        except ProcessIdentityError:
            verdict = Liveness.GONE
        if verdict != Liveness.ALIVE:
            os.close(self._pidfd)
            raise ProcessGoneError("the process of the handle is gone or is another one")
        self._exited = False

    @property
    def pid(self) -> int:
        """The wrapper's pid."""
        return self.handle.pid

    @property
    def returncode(self) -> int | None:
        """Always None: the exit status of a process that is not our child is unknowable."""
        return None

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds; :data:`EXITED` once gone, None on timeout."""
        if self._exited:
            return EXITED
        readable, _, _ = select.select([self._pidfd], [], [], timeout)
        if readable:
            self._exited = True
            return EXITED
        return None

    def send_graceful(self, sig: int) -> bool:
        """TERM/INT/HUP to the wrapper alone, through the pidfd."""
        if sig not in GRACEFUL_SIGNALS:
            raise ValueError("only TERM, INT or HUP")
        if self._exited:
            return False
        return signal_process(self.handle.pid, sig, pidfd=self._pidfd)

    def kill_group(self) -> bool:
        """KILL the handle's group, only while its leader is still alive: once the leader
        is gone (and reaped by someone else) its group id could be reused."""
        if self.wait(0) is not None:
            return False
        return signal_group(self.handle.pgid, signal.SIGKILL)

    def close(self) -> None:
        """Close the pidfd (idempotent)."""
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
