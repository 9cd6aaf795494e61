"""Qinglong 3 remote-attempt wrapper: the watch socket and the attempt lock (docs/protocols.md §3.3,
§4.2 "Self-fencing"; case C18).

Never imported by the worker: it runs as ``python3 -I -S group_wrapper.py <watch_fd>
<lock_fd> -- <argv...>`` as the leader of a new process group (the worker spawns it with
``start_new_session``). It imports only os, _signal, select, sys and time: its memory is paid
once per running attempt.

- ``watch_fd`` is this wrapper's end of a socket pair whose other end only the worker holds;
  it is not passed to the command. End-of-file means the worker died (or abandoned the
  attempt): the wrapper then stops everything of the attempt (see :func:`stop_everything`)
  and exits.
- ``lock_fd`` is the attempt lock, already exclusively flocked by the worker on this open
  file description; it is inherited by the command, so every process of the attempt holds
  the lock, even one that left the group with ``setsid``.
- The command runs in this same group (every signal at its default disposition, an empty
  signal mask). When it ends, the wrapper closes its own copy of the lock, writes the
  command's status to the socket (``<code>\\n``: the exit code, or 128+N for a death by
  signal N, as shells do; 127 command missing, 126 cannot execute) and then WAITS: a byte
  from the worker (it has stopped the leftovers) => exit with that status; end-of-file (the
  worker died meanwhile) => stop everything. So leftovers never outlive the worker.
- The worker also writes its self-fencing deadline for the attempt on the socket, a line
  ``d<seconds>\\n`` (a CLOCK_BOOTTIME reading, ``worker/clock.py``: one clock for every
  process of the host, counting suspended time as the database's lease clock does) each
  time it moves; the release is the byte ``q``. When the newest deadline passes, in either
  phase, the wrapper KILLs everything of the attempt at once
  (:func:`stop_everything` without grace): a worker that is alive but frozen (SIGSTOP, a
  stall) cannot do it, yet its lease is about to expire and a retry may start elsewhere
  (case C21). Bytes outside this contract are skipped; the deadline only moves forward.
- It ignores TERM/INT/HUP itself: the worker signals the whole group, so the command gets
  them directly; the wrapper stays to report the command's status.
- ``QL3_WATCH_LC_CTYPE`` (``-`` when the task set no LC_CTYPE, else ``=value``) restores the
  task's LC_CTYPE, which CPython's locale coercion may rewrite; it is removed before the
  command starts.
"""

import _signal as signal  # type: ignore[import-not-found]  # C module: `signal` pulls enum
import os
import select
import sys
import time

GRACE_S = 0.3
KILL_ROUNDS = 5
EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126
EXIT_BAD_CONTRACT = 125
ENV_LC_CTYPE = "QL3_WATCH_LC_CTYPE"
GRACEFUL = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# every standard signal back to its default for the command, as the local wrapper does
# (CPython itself ignores PIPE and XFSZ, and SIG_IGN survives exec)
DEFAULTED = tuple(s for s in range(1, 32) if s not in (signal.SIGKILL, signal.SIGSTOP))


def lock_holders(lock_id: tuple[int, int]) -> list[int]:
    """Pids > 1, other than this process and its parent (the worker), with an fd open on the
    file ``lock_id`` = (st_dev, st_ino): a /proc scan."""
    skip = (os.getpid(), os.getppid())
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) > 1 and int(name) not in skip and holds(name, lock_id):
            found.append(int(name))
    return found


def holds(pid: str, lock_id: tuple[int, int]) -> bool:
    """True when process ``pid`` has an fd open on ``lock_id``."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == lock_id:
            return True
    return False


def signal_holder(pid: int, lock_id: tuple[int, int], sig: int) -> None:
    """Send ``sig`` to ``pid`` through a pidfd, only if it still holds the lock once pinned
    (a reused pid is never hit)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if holds(str(pid), lock_id):
            signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def stop_everything(lock_id: tuple[int, int], grace_s: float = GRACE_S) -> None:
    """The worker is gone: TERM to this group and to every other holder of the lock, a short
    grace, KILL to the holders (a few rounds, for late forks), then KILL to the group, this
    process included. ``grace_s`` 0 (the fence deadline passed): KILL at once, no TERM.
    Never signals a group this process does not lead, nor one <= 1."""
    pgrp = os.getpgrp()
    if pgrp <= 1 or pgrp != os.getpid():
        os._exit(EXIT_BAD_CONTRACT)
    if grace_s > 0:
        try:  # noqa: SIM105  (contextlib is one import too many here)
            os.killpg(pgrp, signal.SIGTERM)  # ignored by this process
        except OSError:
            pass
        for pid in lock_holders(lock_id):
            signal_holder(pid, lock_id, signal.SIGTERM)
        time.sleep(grace_s)
    for _ in range(KILL_ROUNDS):
        holders = lock_holders(lock_id)
        if not holders:
            break
        for pid in holders:
            signal_holder(pid, lock_id, signal.SIGKILL)
        time.sleep(0.02)
    os.killpg(pgrp, signal.SIGKILL)
    os._exit(EXIT_BAD_CONTRACT)  # not reached: KILL includes this process


def take_input(pending: bytes, deadline: float | None) -> tuple[bytes, float | None, bool]:
    """Parse what the worker sent: deadline lines ``d<seconds>\\n`` (the newest sane one is
    kept) and the release byte ``q``. Returns (the incomplete rest, deadline, released)."""
    released = False
    while pending:
        head = pending[:1]
        if head == b"q":
            released, pending = True, pending[1:]
        elif head == b"d":
            line, newline, rest = pending.partition(b"\n")
            if not newline:
                return (pending if len(pending) < 256 else b""), deadline, released
            pending = rest
            try:
                value = float(line[1:])
            except ValueError:
                continue
            if 0.0 < value < 1e12 and (deadline is None or value > deadline):  # no NaN/inf
                deadline = value
        else:
            pending = pending[1:]  # outside the contract
    return pending, deadline, released


def wait_ms(deadline: float | None) -> int | None:
    """poll() timeout (ms) until ``deadline`` (None: no deadline, wait without end)."""
    if deadline is None:
        return None
    return max(0, int((deadline - time.clock_gettime(time.CLOCK_BOOTTIME)) * 1000) + 1)


def passed(deadline: float | None) -> bool:
    return deadline is not None and time.clock_gettime(time.CLOCK_BOOTTIME) >= deadline


def user_environment() -> dict[str, str]:
    """This process's environment for the command, with the task's own LC_CTYPE restored."""
    env = dict(os.environ)
    saved = env.pop(ENV_LC_CTYPE, "-")
    env.pop("LC_CTYPE", None)
    if saved.startswith("="):
        env["LC_CTYPE"] = saved[1:]
    return env


def run_command(argv: list[str], watch_fd: int, lock_id: tuple[int, int]
                ) -> tuple[int, bytes, float | None]:
    """Spawn ``argv`` and wait for it, watching the socket and the fence deadline; returns
    its status code, the unparsed input and the deadline."""
    try:
        child = os.posix_spawnp(argv[0], argv, user_environment(), setsigmask=(),
                                setsigdef=DEFAULTED)
    except FileNotFoundError:
        sys.stderr.write(f"ql3: command not found: {argv[0]}\n")
        return EXIT_NOT_FOUND, b"", None
    except OSError as exc:
        sys.stderr.write(f"ql3: cannot execute {argv[0]}: {exc.strerror}\n")
        return EXIT_CANNOT_EXECUTE, b"", None
    pidfd = os.pidfd_open(child)
    poller = select.poll()
    poller.register(watch_fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    pending, deadline = b"", None
    while True:
        for fd, _events in poller.poll(wait_ms(deadline)):
            if fd == watch_fd:
                data = os.read(watch_fd, 4096)
                if not data:
                    stop_everything(lock_id)  # the worker is gone: the attempt dies with it
                pending, deadline, _ = take_input(pending + data, deadline)
            if fd == pidfd:
                _, status = os.waitpid(child, 0)
                code = os.waitstatus_to_exitcode(status)
                return (128 - code if code < 0 else code), pending, deadline
        if passed(deadline):
            stop_everything(lock_id, grace_s=0)  # the worker did not renew in time: frozen


def main(args: list[str]) -> int:
    """Run the contract above; ``args`` is ``sys.argv[1:]``."""
    if len(args) < 4 or args[2] != "--" or os.getpgrp() != os.getpid():
        sys.stderr.write("ql3 group wrapper: bad invocation\n")
        return EXIT_BAD_CONTRACT
    watch_fd, lock_fd = int(args[0]), int(args[1])
    for sig in GRACEFUL:
        signal.signal(sig, signal.SIG_IGN)
    os.set_inheritable(watch_fd, False)
    st = os.fstat(lock_fd)
    lock_id = (st.st_dev, st.st_ino)
    code, pending, deadline = run_command(args[3:], watch_fd, lock_id)
    os.close(lock_fd)  # from now on only leftovers hold the lock
    try:
        os.write(watch_fd, b"%d\n" % code)
    except OSError:
        stop_everything(lock_id)
    poller = select.poll()
    poller.register(watch_fd, select.POLLIN)
    while True:  # until the worker answers (release), dies (EOF) or misses its deadline
        if poller.poll(wait_ms(deadline)):
            try:
                data = os.read(watch_fd, 4096)
            except OSError:
                data = b""
            if not data:
                stop_everything(lock_id)
            pending, deadline, released = take_input(pending + data, deadline)
            if released:
                return code
        if passed(deadline):
            stop_everything(lock_id, grace_s=0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
