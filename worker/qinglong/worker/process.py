"""Launching one remote attempt as its own process group behind the pipe-watch wrapper
(DESIGN.md §3.2–§3.3 reused by §4.2; case C01).

The wrapper (``group_wrapper.py``) leads a new session and process group; the worker keeps the
only write end of the watch pipe (both ends are created close-on-exec and only the read end is
passed, to this wrapper alone), so if the worker dies the wrapper kills the group. Signals go
through ``qinglong.shared.process.signals`` (never a group ≤ 1 or the worker's own).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qinglong.shared.errors import ProcessIdentityError
from qinglong.shared.process.identity import read_stat
from qinglong.shared.process.signals import signal_group

WRAPPER_PATH = Path(__file__).with_name("group_wrapper.py")
POLL_S = 0.02


def live_group_members(pgid: int) -> list[int]:
    """Pids of the non-zombie processes whose process group is ``pgid`` (a /proc scan).

    Zombies do not count: a reparented child stays a zombie until init reaps it, which on
    some hosts takes seconds, yet it runs nothing.
    """
    found: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = read_stat(int(name))
        except ProcessIdentityError:
            continue
        if stat is not None and stat.pgid == pgid and stat.state not in ("Z", "X"):
            found.append(stat.pid)
    return found


class CwdMissingError(OSError):
    """The task's working directory does not exist or is not a directory."""


@dataclass(frozen=True)
class ExitStatus:
    """How the attempt's command ended: ``exit_code`` for a normal exit, ``signal`` for a
    death by signal (the wrapper's 128+N, or the wrapper itself killed by N)."""

    exit_code: int | None
    signal: int | None


def decode_status(returncode: int) -> ExitStatus:
    """Map the wrapper's return code: negative => killed by that signal; 129–192 => the
    command died by signal code−128 (the shell convention; an explicit ``exit 137`` reads the
    same); else an exit code."""
    if returncode < 0:
        return ExitStatus(None, -returncode)
    if 128 < returncode <= 128 + 64:
        return ExitStatus(None, returncode - 128)
    return ExitStatus(returncode, None)


class AttemptProcess:
    """One spawned attempt: the wrapper (``pid``, leader of group ``pgid``) and the watch
    pipe's write end. Methods are safe to call from the attempt's own thread."""

    def __init__(self, popen: subprocess.Popen[bytes], watch_w: int) -> None:
        self._popen = popen
        self._watch_w = watch_w
        self.pid = popen.pid
        self.pgid = popen.pid

    def poll(self) -> int | None:
        """The wrapper's return code once it exited (reaped), else None."""
        return self._popen.poll()

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` seconds for the wrapper; its return code or None."""
        try:
            return self._popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def group_alive(self) -> bool:
        """True while any live (non-zombie) process of the attempt's group exists."""
        return bool(live_group_members(self.pgid))

    def stop(self, grace_s: float) -> int:
        """TERM to the whole group, up to ``grace_s`` seconds for it to vanish, then KILL to
        the group; returns the wrapper's return code (DESIGN.md §3.3 escalation)."""
        signal_group(self.pgid, 15)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self._popen.poll()
            if not self.group_alive():
                break
            time.sleep(POLL_S)
        if self.group_alive():
            return self.kill_now()
        return self._popen.wait()

    def kill_now(self) -> int:
        """KILL to the whole group at once (lease lost or self-fence); reaps the wrapper and
        returns its return code."""
        signal_group(self.pgid, 9)
        code = self._popen.wait()
        if self.group_alive():  # members not yet reaped by init; KILL is already pending
            signal_group(self.pgid, 9)
        return code

    def release_watch(self) -> None:
        """Close the worker's write end of the watch pipe (idempotent)."""
        if self._watch_w >= 0:
            os.close(self._watch_w)
            self._watch_w = -1


def spawn_attempt(command: list[str], env: Mapping[str, str], cwd: str | None,
                  output_fd: int) -> AttemptProcess:
    """Start ``command`` under the wrapper in a new process group with exactly ``env`` (the
    clean attempt environment), working directory ``cwd`` (None: the worker's), stdin from
    /dev/null and stdout+stderr to ``output_fd``.

    Raises CwdMissingError when ``cwd`` is not an existing directory; OSError or ValueError
    (NUL in argv/env) from the spawn itself. The watch pipe's fds never leak on failure.
    """
    if cwd is not None and not os.path.isdir(cwd):
        raise CwdMissingError(f"working directory missing: {cwd}")
    wrapper_env = dict(env)
    lc_ctype = env.get("LC_CTYPE")
    wrapper_env["QL3_WATCH_LC_CTYPE"] = "-" if lc_ctype is None else "=" + lc_ctype
    watch_r, watch_w = os.pipe()  # O_CLOEXEC: no other child inherits either end
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WRAPPER_PATH), str(watch_r), "--", *command],
            env=wrapper_env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=output_fd,
            stderr=output_fd, start_new_session=True, close_fds=True, pass_fds=(watch_r,),
        )
    except BaseException:
        os.close(watch_w)
        raise
    finally:
        os.close(watch_r)
    return AttemptProcess(popen, watch_w)
