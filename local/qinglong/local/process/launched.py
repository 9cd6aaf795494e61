"""A started attempt as its owner holds it (docs/protocols.md §3.2 start gate, §3.3 signals).

The wrapper is reaped only by :meth:`LaunchedProcess.close`: until then its pid and process
group id stay pinned (a zombie keeps both), so :meth:`kill_group` can never hit a reused
group, and graceful signals go through a pidfd, so a reused pid is never hit either.
"""

from __future__ import annotations

import math
import os
import select
import signal
import subprocess

from qinglong.shared.errors import QinglongError, ValidationError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.process.signals import GRACEFUL_SIGNALS, signal_group, signal_process

GATE_BYTE = b"\x01"


class LaunchStateError(QinglongError):
    """The gate was already opened or abandoned, or the process object was closed."""

    code = "launch_state"


class LaunchedProcess:
    """One running wrapper: its durable handle, paths, start gate and pidfd.

    Created only by ``LocalProcessLauncher.start`` (ADR-0069 §2 step 6), never from a bare
    pid. ``wait``/``returncode`` report the wrapper's status as :mod:`subprocess` does: the
    exit code (the user's, 128+N for signal N, 125 when no user code ran) or ``-N`` when the
    wrapper itself died of signal N. ``close`` must not race the other methods.
    """

    def __init__(
        self,
        *,
        handle: ProcessHandle,
        popen: subprocess.Popen[bytes],
        pidfd: int,
        gate_fd: int,
        receipt_path: str,
        lock_path: str,
        output_path: str,
    ) -> None:
        self.handle = handle
        self.receipt_path = receipt_path
        self.lock_path = lock_path
        self.output_path = output_path
        self._popen = popen
        self._pidfd = pidfd
        self._gate_fd = gate_fd
        self._returncode: int | None = None

    @property
    def pid(self) -> int:
        """The wrapper's pid (also its process group id)."""
        return self.handle.pid

    def open_gate(self) -> bool:
        """Write the one gate byte and close the write end: the user command starts.

        Call only after the handle is durably saved (docs/protocols.md §3.2). Returns False when the
        wrapper is already gone (EPIPE). Raises LaunchStateError if the gate was already
        opened or abandoned.
        """
        if self._gate_fd < 0:
            raise LaunchStateError("start gate already opened or abandoned")
        fd, self._gate_fd = self._gate_fd, -1
        try:
            return os.write(fd, GATE_BYTE) == 1
        except BrokenPipeError:
            return False
        finally:
            os.close(fd)

    def abandon_gate(self) -> None:
        """Close the gate without writing: the wrapper publishes ``not_started`` and exits
        with 125 without running user code. Idempotent; a no-op after :meth:`open_gate`."""
        if self._gate_fd >= 0:
            fd, self._gate_fd = self._gate_fd, -1
            os.close(fd)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait up to ``timeout`` seconds (``None``: forever) for the wrapper to exit.

        Returns its status (see the class docstring) or ``None`` on timeout. Does not reap:
        the pid stays pinned until :meth:`close`. Raises LaunchStateError after close.
        """
        if self._returncode is not None:
            return self._returncode
        if self._pidfd < 0:
            raise LaunchStateError("launched process is closed")
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        wait_ms = None if timeout is None else max(0, math.ceil(timeout * 1000))
        if not poller.poll(wait_ms):
            return None
        info = os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return None
        code = info.si_status
        self._returncode = code if info.si_code == os.CLD_EXITED else -code
        return self._returncode

    @property
    def returncode(self) -> int | None:
        """The wrapper's status if it has exited, else ``None`` (never blocks)."""
        if self._returncode is None and self._pidfd >= 0:
            return self.wait(0)
        return self._returncode

    def send_graceful(self, sig: int) -> bool:
        """Send SIGTERM, SIGINT or SIGHUP to the wrapper alone, through its pidfd.

        The wrapper forwards it once to its group (docs/protocols.md §3.3). Returns False when the
        wrapper is gone. Raises ValidationError for another signal, LaunchStateError after
        close.
        """
        if sig not in GRACEFUL_SIGNALS:
            raise ValidationError("signal", "must be SIGTERM, SIGINT or SIGHUP")
        if self._pidfd < 0:
            raise LaunchStateError("launched process is closed")
        return signal_process(self.handle.pid, sig, pidfd=self._pidfd)

    def kill_group(self) -> bool:
        """SIGKILL the whole process group of the handle (escalation, docs/protocols.md §3.3).

        Goes through the signal guard (never a pgid <= 1 or our own group). Returns False
        when the group no longer exists. Raises LaunchStateError after close.
        """
        if self._pidfd < 0:
            raise LaunchStateError("launched process is closed")
        return signal_group(self.handle.pgid, signal.SIGKILL)

    def close(self) -> None:
        """Abandon the gate if still closed, reap the wrapper if it has exited, close the
        pidfd. Idempotent. A still-running wrapper is left to :mod:`subprocess` to reap."""
        self.abandon_gate()
        if self._pidfd < 0:
            return
        if self.wait(0) is not None:
            self._popen.wait()
        os.close(self._pidfd)
        self._pidfd = -1

    def __enter__(self) -> LaunchedProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
