"""Launching one remote attempt as its own process group behind the wrapper, and stopping
everything it leaves behind (docs/protocols.md §3.2–§3.3 reused by §4.2; cases C01, C18).

The wrapper (``group_wrapper.py``) leads a new session and process group. The worker keeps
the only other end of the watch socket pair (both ends close-on-exec; only the wrapper's end
is passed, to the wrapper alone), so if the worker dies the wrapper stops the attempt. The
attempt lock ``<attempt>.lock`` in the private spool directory is created and flocked here,
before the wrapper exists, and that open file description is handed to the wrapper and
through it to the command: every process of the attempt holds the lock, even one that left
the group. When the command ends the wrapper reports its status on the socket and waits; the
worker stops the leftovers (lock holders and group members: TERM, grace, KILL; the shared
``stop_leftovers``) and only then releases the wrapper. Signals go through
``qinglong.shared.process.signals`` (never a group ≤ 1 or the worker's own).

With isolation (``isolation.py``, docs/protocols.md §4.8) the wrapper gets the sandbox's
options: in ``uid`` mode every process with the attempt's uid is a leftover too; in
``userns`` mode the namespace's init stops what the command left inside before the status
arrives, and the status line carries how many it found and had to KILL (``<code> <found>
<killed>``), added to the report here.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import py_compile
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qinglong.shared.process.leftovers import LeftoverReport, stop_leftovers
from qinglong.shared.process.lock_holders import group_members
from qinglong.shared.process.path_lock import PathLock, create_locked
from qinglong.shared.process.signals import signal_group
from qinglong.worker import clock
from qinglong.worker.isolation import Sandbox, processes_of

WRAPPER_PATH = Path(__file__).with_name("group_wrapper.py")
_PROGRAMS: dict[Path, str] = {}  # spool directory -> the wrapper's compiled program there
_PROGRAMS_LOCK = threading.Lock()
POLL_S = 0.02
RELEASE_WAIT_S = 2.0
STATUS_MAX = 64


def live_group_members(pgid: int) -> list[int]:
    """Pids of the non-zombie processes whose process group is ``pgid`` (the shared
    ``group_members``: one ``getpgid`` per pid of /proc, a stat read only for a match).

    Zombies do not count: a reparented child stays a zombie until init reaps it, which on
    some hosts takes seconds, yet it runs nothing.
    """
    return group_members(pgid)


def wrapper_program(directory: Path) -> str:
    """The path the wrapper is started from: its bytecode, compiled once per worker process
    into ``directory`` (the private spool directory) as ``.group_wrapper-<tag>-<sha>.pyc``
    (the interpreter's cache tag and the source's SHA-256 prefix, so workers of other
    versions sharing the directory never run each other's), else ``group_wrapper.py``
    itself when that cannot be written. A script run from its source is compiled on every
    start (two thirds of the wrapper's start-up CPU above a bare interpreter's; bench/README.md
    "Worker side"); the program is the same code, so the wrapper's contract is unchanged."""
    with _PROGRAMS_LOCK:
        known = _PROGRAMS.get(directory)
        if known is not None and os.path.isfile(known):
            return known
        try:
            source = WRAPPER_PATH.read_bytes()
            tag = sys.implementation.cache_tag or "py"
            target = directory / (f".group_wrapper-{tag}-"
                                  f"{hashlib.sha256(source).hexdigest()[:16]}.pyc")
            # written anew by each worker process (a file found there is never trusted),
            # to a temporary name then renamed: a sharing worker never runs half a file
            py_compile.compile(str(WRAPPER_PATH), cfile=str(target), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        except (OSError, py_compile.PyCompileError):
            return str(WRAPPER_PATH)
        _PROGRAMS[directory] = str(target)
        return str(target)


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
    """One spawned attempt: the wrapper (``pid``, leader of group ``pgid``), the worker's end
    of the watch socket and the attempt lock at ``lock_path``. Use it from one thread (the
    attempt's), but for ``set_deadline`` (any thread). The group is signalled only while the
    wrapper is unreaped (its id pinned)."""

    def __init__(self, popen: subprocess.Popen[bytes], watch: socket.socket,
                 lock_path: str, uid: int | None = None) -> None:
        self._popen = popen
        self._watch: socket.socket | None = watch
        self._watch_lock = threading.Lock()  # set_deadline comes from the heartbeat thread
        self._buffer = b""
        self._code: int | None = None
        self.lock = PathLock(lock_path)
        self.pid = popen.pid
        self.pgid = popen.pid
        self.uid = uid  # the attempt's own uid (isolation): its processes are leftovers
        self.inside_found = 0  # leftovers a namespace's init found and stopped
        self.inside_killed = 0

    def poll(self) -> int | None:
        """The wrapper's return code once it exited (reaped), else None."""
        return self._popen.poll()

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` seconds for the command to end. Returns its status code
        (exit code, or 128+N for a death by signal N) from the wrapper's status line; when
        the wrapper died without one, the wrapper's return code (negative: killed by that
        signal). None while the command runs."""
        deadline = clock.now() + timeout_s
        while self._code is None:
            if self._watch is None:
                try:
                    self._code = self._popen.wait(max(0.0, deadline - clock.now()))
                except subprocess.TimeoutExpired:
                    return None
                break
            ready, _, _ = select.select([self._watch], [], [],
                                        max(0.0, deadline - clock.now()))
            if not ready:
                return None
            chunk = self._watch.recv(STATUS_MAX)
            if not chunk:  # the wrapper is gone without a status: its own return code
                self._code = self._popen.wait()
                break
            self._buffer += chunk
            line, newline, _ = self._buffer.partition(b"\n")
            parts = line.split()
            if newline and len(parts) in (1, 3) and all(p.isdigit() for p in parts):
                self._code = int(parts[0])
                if len(parts) == 3:
                    self.inside_found, self.inside_killed = int(parts[1]), int(parts[2])
            elif newline:  # not our wrapper's contract: stop it, keep its return code
                self.kill_now()
        return self._code

    def others_in_group(self) -> list[int]:
        """Live members of the attempt's group other than the wrapper ([] once it is reaped:
        the id may belong to another group by then)."""
        if self._popen.returncode is not None:
            return []
        return [pid for pid in live_group_members(self.pgid) if pid != self.pid]

    def group_alive(self) -> bool:
        """True while the wrapper is unreaped or any other process of its group lives."""
        return self._popen.returncode is None or bool(self.others_in_group())

    def _signal_group(self, sig: int) -> None:
        if self._popen.returncode is None:  # unreaped: the group id is still ours
            signal_group(self.pgid, sig)

    def stop(self, grace_s: float) -> int:
        """TERM to the whole group, up to ``grace_s`` seconds for the command to end and the
        rest of the group to vanish, then KILL to the group (docs/protocols.md §3.3 escalation);
        returns the command's status code as :meth:`wait` does. Lock holders outside the
        group are :meth:`clear_leftovers`' work."""
        self._signal_group(15)
        deadline = clock.now() + grace_s
        while clock.now() < deadline:
            code = self.wait(POLL_S)
            if code is not None and not self.others_in_group():
                return code
        return self.kill_now()

    def kill_now(self) -> int:
        """KILL to the whole group at once (the wrapper included); reaps the wrapper and
        returns the command's status code (the wrapper's -9 when no status had arrived)."""
        self._signal_group(9)
        code = self._popen.wait()
        if self._code is None:
            self._code = code
        return self._code

    def clear_leftovers(self, grace_s: float) -> LeftoverReport:
        """After the command ended (or the group was killed): find every process of the
        attempt still alive — holders of the attempt lock (``setsid`` escapees included) and
        members of the group other than the wrapper — and stop them (TERM, ``grace_s``
        seconds, KILL; never pid ≤ 1 or the worker), and every process of the attempt's own
        uid. What a namespace's init already stopped is counted in. Never raises;
        ``report.found`` > 0 or ``report.unresolved`` means something was left behind.

        Nothing left (the usual case) is decided by one look (:meth:`_nothing_left`); only
        when something may be left does the shared ``stop_leftovers`` look again, find the
        lock's holders by their fds and stop them (docs/protocols.md §4.2 "Attempt lock and
        leftovers")."""
        if self._nothing_left():
            report = LeftoverReport(grace_s=grace_s)
        else:
            report = stop_leftovers(_Leftovers(self), pgid=None, grace_s=grace_s)
        if not self.inside_found:
            return report
        return LeftoverReport(found=report.found + self.inside_found,
                              in_group=report.in_group,
                              killed=report.killed + self.inside_killed,
                              unresolved=report.unresolved, grace_s=grace_s)

    def _nothing_left(self) -> bool:
        """True when no process of the attempt can still live: the attempt lock is free
        (every process that kept the inherited lock fd — in the group or out of it with
        ``setsid`` — is gone; a flock probe, no scan), no member of the wrapper's group but
        the wrapper lives (one that closed the lock fd and stayed in the group: the
        ``getpgid`` scan) and, in ``uid`` mode, no process of the attempt's uid lives (one
        that closed the fd and left the group). A lock that cannot be probed is "maybe":
        the full path decides."""
        try:
            if self.lock.held():
                return False
        except OSError:
            return False
        return not self.others_in_group() and not (
            self.uid is not None and processes_of(self.uid))

    def release(self) -> int | None:
        """Tell a waiting wrapper to exit (call after :meth:`clear_leftovers`), reap it
        within 2 s (else KILL its group), close the socket and discard the lock file if it is
        free. Returns the wrapper's return code, None if it could not be reaped."""
        with self._watch_lock:
            watch = self._watch
            if watch is not None:
                with contextlib.suppress(OSError):
                    watch.send(b"q")
        if watch is not None:
            try:
                self._popen.wait(RELEASE_WAIT_S)
            except subprocess.TimeoutExpired:
                self.kill_now()
            self.abandon()
        with contextlib.suppress(OSError):
            self.lock.discard()
        return self._popen.returncode

    def abandon(self) -> None:
        """Close the worker's end of the watch socket without a release (idempotent): a
        wrapper still running stops everything of the attempt and exits."""
        with self._watch_lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def set_deadline(self, deadline: float) -> None:
        """Hand the wrapper the self-fencing deadline (``clock.now()`` s): it KILLs
        everything of the attempt once that passes without a newer one, which a frozen worker
        cannot do (case C21). Thread-safe; never blocks; nothing once released or abandoned."""
        with self._watch_lock:
            if self._watch is not None:
                with contextlib.suppress(OSError):  # a full buffer or a gone wrapper
                    self._watch.send(b"d%.6f\n" % deadline, socket.MSG_DONTWAIT)


class _Leftovers:
    """``AttemptLockPort`` of one attempt: the lock, plus its group's members other than the
    wrapper, plus every process of its own uid (held while any is non-empty)."""

    def __init__(self, proc: AttemptProcess) -> None:
        self._proc = proc

    def _of_uid(self) -> list[int]:
        return [] if self._proc.uid is None else processes_of(self._proc.uid)

    def held(self) -> bool:
        return (self._proc.lock.held() or bool(self._proc.others_in_group())
                or bool(self._of_uid()))

    def holders(self) -> list[int]:
        # a free lock has no holder (they all share the locked open file description), so
        # the /proc fd scan is paid only when something was left behind
        found = set(self._proc.lock.holders()) if self._proc.lock.held() else set()
        return sorted(found | set(self._proc.others_in_group()) | set(self._of_uid()))


def spawn_attempt(command: list[str], env: Mapping[str, str], cwd: str | None,
                  output_fd: int, lock_path: Path,
                  sandbox: Sandbox | None = None) -> AttemptProcess:
    """Start ``command`` under the wrapper in a new process group with exactly ``env`` (the
    clean attempt environment), working directory ``cwd`` (None: the caller's; the runner
    always passes one: the task's, else HOME or /), stdin from
    /dev/null, stdout+stderr to ``output_fd``, holding the attempt lock created (0600,
    ``O_EXCL | O_NOFOLLOW``) and flocked at ``lock_path``, isolated as ``sandbox`` says
    (None: as the worker's own user).

    Raises CwdMissingError when ``cwd`` is not an existing directory; FileExistsError when
    the lock file exists; OSError or ValueError (NUL in argv/env) from the spawn itself. No
    fd leaks on failure and the lock file is removed.
    """
    if cwd is not None and not os.path.isdir(cwd):
        raise CwdMissingError(f"working directory missing: {cwd}")
    wrapper_env = dict(env)
    lc_ctype = env.get("LC_CTYPE")
    wrapper_env["QL3_WATCH_LC_CTYPE"] = "-" if lc_ctype is None else "=" + lc_ctype
    lock_fd = create_locked(str(lock_path))
    ours, theirs = socket.socketpair()  # non-inheritable: no other child gets either end
    try:
        popen = subprocess.Popen(
            [sys.executable, "-I", "-S", wrapper_program(lock_path.parent),
             str(theirs.fileno()), str(lock_fd),
             *(sandbox.wrapper_args if sandbox else ()), "--", *command],
            env=wrapper_env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=output_fd,
            stderr=output_fd, start_new_session=True, close_fds=True,
            pass_fds=(theirs.fileno(), lock_fd),
        )
    except BaseException:
        ours.close()
        with contextlib.suppress(OSError):
            os.unlink(lock_path)
        raise
    finally:
        theirs.close()
        os.close(lock_fd)  # the wrapper's copy keeps the lock
    return AttemptProcess(popen, ours, str(lock_path), sandbox.uid if sandbox else None)
