"""Qinglong 3 remote-attempt wrapper: the pipe watch (DESIGN.md §4.2 "Self-fencing").

Never imported by the worker: it runs as ``python3 -I -S group_wrapper.py <watch_fd> --
<argv...>`` as the leader of a new process group (the worker spawns it with
``start_new_session``). It imports only os, _signal, select, sys and time: its memory is paid
once per running attempt.

- ``watch_fd`` is the read end of a pipe whose write end only the worker holds. The worker
  never writes to it: end-of-file means the worker died (or abandoned the attempt), and this
  wrapper then sends TERM to its whole group, waits ``GRACE_S`` and sends KILL to the group,
  itself included (well under a second in total).
- Otherwise it starts the user command in this same group (default TERM/INT/HUP dispositions,
  an empty signal mask), waits for it and exits with its status: the exit code, or 128+N for
  a death by signal N (as shells do); 127 when the command is missing, 126 when it cannot be
  executed.
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
EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126
EXIT_BAD_CONTRACT = 125
ENV_LC_CTYPE = "QL3_WATCH_LC_CTYPE"
GRACEFUL = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def kill_own_group() -> None:
    """TERM to this wrapper's group, a short grace, then KILL to the group (this process
    included). Never signals a group this process does not lead, nor one ≤ 1."""
    pgrp = os.getpgrp()
    if pgrp <= 1 or pgrp != os.getpid():
        os._exit(EXIT_BAD_CONTRACT)
    try:  # noqa: SIM105  (contextlib is one import too many here)
        os.killpg(pgrp, signal.SIGTERM)  # ignored by this process
    except OSError:
        pass
    time.sleep(GRACE_S)
    os.killpg(pgrp, signal.SIGKILL)
    os._exit(EXIT_BAD_CONTRACT)  # not reached: KILL includes this process


def user_environment() -> dict[str, str]:
    """This process's environment for the command, with the task's own LC_CTYPE restored."""
    env = dict(os.environ)
    saved = env.pop(ENV_LC_CTYPE, "-")
    env.pop("LC_CTYPE", None)
    if saved.startswith("="):
        env["LC_CTYPE"] = saved[1:]
    return env


def main(args: list[str]) -> int:
    """Run the contract above; ``args`` is ``sys.argv[1:]``."""
    if len(args) < 3 or args[1] != "--" or os.getpgrp() != os.getpid():
        sys.stderr.write("ql3 group wrapper: bad invocation\n")
        return EXIT_BAD_CONTRACT
    watch_fd = int(args[0])
    argv = args[2:]
    for sig in GRACEFUL:
        signal.signal(sig, signal.SIG_IGN)
    os.set_inheritable(watch_fd, False)
    try:
        child = os.posix_spawnp(argv[0], argv, user_environment(), setsigmask=(),
                                setsigdef=GRACEFUL)
    except FileNotFoundError:
        sys.stderr.write(f"ql3: command not found: {argv[0]}\n")
        return EXIT_NOT_FOUND
    except OSError as exc:
        sys.stderr.write(f"ql3: cannot execute {argv[0]}: {exc.strerror}\n")
        return EXIT_CANNOT_EXECUTE
    pidfd = os.pidfd_open(child)
    poller = select.poll()
    poller.register(watch_fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    while True:
        for fd, _events in poller.poll():
            if fd == watch_fd and not os.read(watch_fd, 1):
                kill_own_group()  # the worker is gone: the attempt dies with it
            if fd == pidfd:
                _, status = os.waitpid(child, 0)
                code = os.waitstatus_to_exitcode(status)
                return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
