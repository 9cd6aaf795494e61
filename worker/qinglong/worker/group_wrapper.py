"""Qinglong 3 remote-attempt wrapper: the watch socket and the attempt lock (docs/protocols.md §3.3,
§4.2 "Self-fencing"; case C18).

Never imported by the worker: it runs as ``python3 -I -S group_wrapper.py <watch_fd>
<lock_fd> [isolation options] -- <argv...>`` as the leader of a new process group (the worker
spawns it with ``start_new_session``). It imports only os, _signal, select, sys and time
(ctypes only in a forked child that then execs or stays tiny): its memory is paid once per
running attempt.

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
- Isolation (docs/protocols.md §4.8), chosen by options between ``<lock_fd>`` and ``--``:
  ``--uid U --gid G``: the wrapper stays root; the command runs as U:G with no
  supplementary groups and ``no_new_privs`` (a forked child drops its ids, then execs), and
  stopping everything of the attempt includes every process whose uid is U.
  ``--userns --keep DIR [--hide DIR]... [--hide-file FILE]... --grace S`` (after ``--uid``'s
  drop when both are given): a forked child enters a new user, mount and PID namespace (its
  uid mapped to itself, never 0, so the command keeps no capability once it execs), covers
  each hidden file with ``/dev/null``, gives ``/tmp``, ``/var/tmp`` and ``/dev/shm`` a fresh
  tmpfs each, covers each hidden directory with an empty tmpfs, binds DIR (its own
  directory) back, makes every other mount read-only, and forks the
  namespace's init: it mounts a private ``/proc``, runs the command, and once the command
  ended stops what else lives in the namespace (TERM, ``S`` seconds, KILL) before it reports
  ``<code> <found> <killed>`` to the wrapper, which passes that line on as the status. The
  namespace dies with its init, so nothing of the attempt outlives a KILL to the group.
- ``QL3_WATCH_LC_CTYPE`` (``-`` when the task set no LC_CTYPE, else ``=value``) restores the
  task's LC_CTYPE, which CPython's locale coercion may rewrite; it is removed before the
  command starts.
"""

from __future__ import annotations

import _signal as signal  # type: ignore[import-not-found]  # C module: `signal` pulls enum
import os
import select
import sys
import time

TYPE_CHECKING = False  # no `typing` import at run time: the wrapper stays small
if TYPE_CHECKING:
    from typing import Any

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
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY, SYS_MOUNT_SETATTR = -100, 0x8000, 1, 442
ENOENT, EACCES, ENOSYS = 2, 13, 38
MOUNT_OPTION_FLAGS = {b"nosuid": MS_NOSUID, b"nodev": MS_NODEV, b"noexec": MS_NOEXEC,
                      b"noatime": 1 << 10, b"nodiratime": 1 << 11, b"relatime": 1 << 21,
                      b"strictatime": 1 << 24}
# shared writable directories: each attempt's namespace gets its own empty tmpfs there
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
PR_SET_DUMPABLE = 4


def lock_holders(lock_id: tuple[int, int], uid: int | None = None) -> list[int]:
    """Pids > 1, other than this process and its parent (the worker), with an fd open on the
    file ``lock_id`` = (st_dev, st_ino), or (``uid`` given, never 0) running as ``uid``: a
    /proc scan."""
    skip = (os.getpid(), os.getppid())
    found = []
    for name in os.listdir("/proc"):
        if (name.isdigit() and int(name) > 1 and int(name) not in skip
                and (holds(name, lock_id) or runs_as(name, uid))):
            found.append(int(name))
    return found


def runs_as(pid: str, uid: int | None) -> bool:
    """True when ``uid`` (not None, not 0) is any of process ``pid``'s real, effective,
    saved or filesystem uids."""
    if not uid:
        return False
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Uid:"):
                    return str(uid).encode() in line.split()[1:]
    except OSError:
        pass
    return False


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


def signal_holder(pid: int, lock_id: tuple[int, int], sig: int, uid: int | None = None
                  ) -> None:
    """Send ``sig`` to ``pid`` through a pidfd, only if it still holds the lock (or runs as
    ``uid``) once pinned (a reused pid is never hit)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        if holds(str(pid), lock_id) or runs_as(str(pid), uid):
            signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def stop_everything(lock_id: tuple[int, int], grace_s: float = GRACE_S) -> None:
    """The worker is gone: TERM to this group and to every other holder of the lock (and
    every process of the attempt's uid, in ``--uid`` mode), a short grace, KILL to them (a
    few rounds, for late forks), then KILL to the group, this process included (in
    ``--userns`` mode the namespace's init, so the whole namespace). ``grace_s`` 0 (the
    fence deadline passed): KILL at once, no TERM. Never signals a group this process does
    not lead, nor one <= 1."""
    uid = OPTIONS.uid
    pgrp = os.getpgrp()
    if pgrp <= 1 or pgrp != os.getpid():
        os._exit(EXIT_BAD_CONTRACT)
    if grace_s > 0:
        try:  # noqa: SIM105  (contextlib is one import too many here)
            os.killpg(pgrp, signal.SIGTERM)  # ignored by this process
        except OSError:
            pass
        for pid in lock_holders(lock_id, uid):
            signal_holder(pid, lock_id, signal.SIGTERM, uid)
        time.sleep(grace_s)
    for _ in range(KILL_ROUNDS):
        holders = lock_holders(lock_id, uid)
        if not holders:
            break
        for pid in holders:
            signal_holder(pid, lock_id, signal.SIGKILL, uid)
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


class Options:
    """The isolation options (see the module docstring); the defaults run the command as
    this process's own user."""

    def __init__(self) -> None:
        self.uid: int | None = None
        self.gid: int | None = None
        self.userns = False
        self.keep = ""
        self.hide: list[str] = []
        self.hide_files: list[str] = []
        self.grace_s = GRACE_S

    def parse(self, args: list[str]) -> bool:
        """Read ``args`` (the options before ``--``); False when they break the contract."""
        try:
            while args:
                flag = args.pop(0)
                if flag == "--uid":
                    self.uid = int(args.pop(0))
                elif flag == "--gid":
                    self.gid = int(args.pop(0))
                elif flag == "--userns":
                    self.userns = True
                elif flag == "--keep":
                    self.keep = args.pop(0)
                elif flag == "--hide":
                    self.hide.append(args.pop(0))
                elif flag == "--hide-file":
                    self.hide_files.append(args.pop(0))
                elif flag == "--grace":
                    self.grace_s = float(args.pop(0))
                else:
                    return False
        except (IndexError, ValueError):
            return False
        if (self.uid is None) != (self.gid is None) or self.uid == 0 or self.gid == 0:
            return False
        return not self.userns or self.keep.startswith("/")


OPTIONS = Options()


def exec_command(argv: list[str], env: dict[str, str]) -> None:
    """In a forked child: every signal back to its default, an empty mask, then exec
    ``argv`` (PATH from ``env``); 127/126 with a line on stderr when that fails."""
    for sig in DEFAULTED:
        try:  # noqa: SIM105
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606  (the task's own argv, as posix_spawnp)
    except FileNotFoundError:
        os.write(2, f"ql3: command not found: {argv[0]}\n".encode(errors="replace"))
        os._exit(EXIT_NOT_FOUND)
    except OSError as exc:
        os.write(2, f"ql3: cannot execute {argv[0]}: {exc.strerror}\n".encode(errors="replace"))
    os._exit(EXIT_CANNOT_EXECUTE)


def _libc() -> tuple[Any, Any]:  # ctypes only in a forked child: no cost in the wrapper
    import ctypes
    import warnings  # noqa: F401  (os.execvpe needs it; the new uid may not read it later)

    return ctypes.CDLL(None, use_errno=True), ctypes


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def drop_to(uid: int, gid: int) -> None:
    """In a forked child: no supplementary groups, ``gid``, ``uid`` (all three ids), and
    ``no_new_privs`` so no setuid program can give a privilege back."""
    libc, _ = _libc()  # imported first: the new uid may not read the interpreter's files
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    # the id change made this process non-dumpable, which hides its own /proc/self files
    # (uid_map) from it; what it execs is dumpable again anyway
    _check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")


def _mount(libc: Any, source: str | None, target: str, fstype: str | None,
           flags: int, data: str | None = None) -> None:
    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    _check(libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)),
           f"mount {target}")


def _mount_setattr(libc: Any, ctypes: Any, path: str, *, readonly: bool,
                   recursive: bool) -> None:
    """Set (or clear) the read-only flag of the mount at ``path`` (and every mount below it
    when ``recursive``) with mount_setattr(2), Linux ≥ 5.12. Raises OSError."""

    class MountAttr(ctypes.Structure):  # type: ignore[misc]  # struct mount_attr
        _fields_ = (("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64))

    attr = MountAttr(MOUNT_ATTR_RDONLY if readonly else 0,
                     0 if readonly else MOUNT_ATTR_RDONLY, 0, 0)
    _check(libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD),
                        path.encode(), ctypes.c_uint(AT_RECURSIVE if recursive else 0),
                        ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr))),
           f"mount_setattr {path}")


def enter_namespaces(keep: str, hide: list[str], hide_files: list[str]) -> None:
    """In a forked child: a new user, mount and PID namespace (this uid and gid mapped to
    themselves), mounts private; each of ``hide_files`` covered by ``/dev/null``; a fresh
    empty tmpfs on each of :data:`SCRATCH` (a private ``/tmp``); each of ``hide`` covered
    by an empty tmpfs and ``keep`` bound back at its own path; then every mount read-only
    except ``keep`` and the scratch tmpfs. The caller's next fork is the namespace's init.
    Raises OSError."""
    libc, ctypes = _libc()
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID), "unshare")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    keep_fd = os.open(keep, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    for path in hide_files:
        if os.path.isfile(path):  # else this uid cannot even reach it: nothing to hide
            _mount(libc, "/dev/null", path, None, MS_BIND)
    scratch = [p for p in SCRATCH if os.path.isdir(p) and not os.path.islink(p)]
    for path in scratch:
        _mount(libc, "tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    covered: list[str] = []
    for path in sorted(set(hide)):
        if any(path == c or path.startswith(c.rstrip("/") + "/") for c in covered):
            continue  # already below a covered directory
        if not os.path.isdir(path):
            continue  # this uid cannot reach it (or a scratch tmpfs covers it already)
        _mount(libc, "tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
               "mode=0700,size=16k")
        covered.append(path)
    os.makedirs(keep, 0o700, exist_ok=True)
    _mount(libc, f"/proc/self/fd/{keep_fd}", keep, None, MS_BIND | MS_REC)
    os.close(keep_fd)
    read_only_except(libc, ctypes, [keep, *scratch])
    os.chdir(keep)


def read_only_except(libc: Any, ctypes: Any, writable: list[str]) -> None:
    """Make every mount of this mount namespace read-only, then the mounts at ``writable``
    writable again: mount_setattr(2) where the kernel has it, else (ENOSYS, before Linux
    5.12) a read-only bind remount of each mount point listed in /proc/self/mountinfo, its
    other flags kept (a user namespace may not clear them). Raises OSError."""
    try:
        _mount_setattr(libc, ctypes, "/", readonly=True, recursive=True)
        for path in writable:
            _mount_setattr(libc, ctypes, path, readonly=False, recursive=False)
        return
    except OSError as exc:
        if exc.errno != ENOSYS:
            raise
    mounts = mount_table()
    for point, flags in mounts.items():
        try:
            _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError as exc:
            if exc.errno not in (ENOENT, EACCES):  # covered by a mount made here: unseen
                raise
    for path in writable:
        _mount(libc, None, path, None, MS_REMOUNT | MS_BIND | mounts.get(path, 0))


def mount_table() -> dict[str, int]:
    """Mount point -> its per-mount flags (nosuid, nodev, noexec, atime) from
    /proc/self/mountinfo, parents before children; for a point mounted over, the top."""
    table: dict[str, int] = {}
    with open("/proc/self/mountinfo", "rb") as fh:
        for line in fh:
            fields = line.split()
            point = fields[4].decode("utf-8", "surrogateescape")
            for code in ("\\040", "\\011", "\\012", "\\134"):
                point = point.replace(code, chr(int(code[1:], 8)))
            flags = 0
            for option in fields[5].split(b","):
                flags |= MOUNT_OPTION_FLAGS.get(option, 0)
            table.pop(point, None)  # re-inserted: the later (upper) mount wins, in order
            table[point] = flags
    return table


def live_others() -> list[int]:
    """Non-zombie pids of this PID namespace other than 1 (its init, this process)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                state = fh.read().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def reap() -> None:
    """Reap every exited child of this init without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def namespace_init(argv: list[str], env: dict[str, str], lock_fd: int, status_fd: int,
                   grace_s: float) -> None:
    """PID 1 of the attempt's namespace: a private /proc, the command as its child, then
    the rest of the namespace stopped (TERM, ``grace_s``, KILL); writes ``<code> <found>
    <killed>`` to ``status_fd`` and exits (the kernel then ends the namespace)."""
    libc, _ = _libc()
    _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    child = os.fork()
    if child == 0:
        os.close(status_fd)
        exec_command(argv, env)
    os.close(lock_fd)  # only the command and what it starts hold the lock
    code = EXIT_BAD_CONTRACT
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            break
    found = killed = 0
    rest = live_others()
    if rest:
        found = len(rest)
        os.kill(-1, signal.SIGTERM)  # every process of the namespace but this init
        deadline = time.monotonic() + grace_s
        while rest and time.monotonic() < deadline:
            time.sleep(0.02)
            reap()
            rest = live_others()
        if rest:
            killed = len(rest)
            os.kill(-1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    os.write(status_fd, b"%d %d %d\n" % (code, found, killed))
    os._exit(0)


def spawn_isolated(argv: list[str], lock_fd: int, status_fd: int) -> int:
    """Fork the command's side as :data:`OPTIONS` says (``--uid`` or ``--userns``); the
    child's pid. In the child a failure to isolate is a line on stderr and exit 126: the
    command never runs unisolated."""
    env = user_environment()
    child = os.fork()
    if child != 0:
        return child
    try:
        os.close(WATCH_FD[0])
        if OPTIONS.uid is not None and OPTIONS.gid is not None:
            drop_to(OPTIONS.uid, OPTIONS.gid)
        if not OPTIONS.userns:
            exec_command(argv, env)
        enter_namespaces(OPTIONS.keep, OPTIONS.hide, OPTIONS.hide_files)
        init = os.fork()
        if init == 0:
            namespace_init(argv, env, lock_fd, status_fd, OPTIONS.grace_s)
        os.close(lock_fd)
        os.close(status_fd)
        _, status = os.waitpid(init, 0)
        os._exit(max(0, os.waitstatus_to_exitcode(status)))
    except BaseException as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        os.write(2, f"ql3: cannot isolate the attempt: {text}\n".encode(errors="replace"))
        os._exit(EXIT_CANNOT_EXECUTE)


WATCH_FD = [-1]


def run_command(argv: list[str], watch_fd: int, lock_fd: int, lock_id: tuple[int, int]
                ) -> tuple[bytes, bytes, float | None]:
    """Spawn ``argv`` and wait for it, watching the socket and the fence deadline; returns
    its status line (``<code>``, or ``<code> <found> <killed>`` from a namespace's init),
    the unparsed input and the deadline."""
    status_r = status_w = -1
    if OPTIONS.uid is None and not OPTIONS.userns:
        try:
            child = os.posix_spawnp(argv[0], argv, user_environment(), setsigmask=(),
                                    setsigdef=DEFAULTED)
        except FileNotFoundError:
            sys.stderr.write(f"ql3: command not found: {argv[0]}\n")
            return b"%d" % EXIT_NOT_FOUND, b"", None
        except OSError as exc:
            sys.stderr.write(f"ql3: cannot execute {argv[0]}: {exc.strerror}\n")
            return b"%d" % EXIT_CANNOT_EXECUTE, b"", None
    else:
        if OPTIONS.userns:
            status_r, status_w = os.pipe()
            os.set_inheritable(status_w, False)
        sys.stderr.flush()
        child = spawn_isolated(argv, lock_fd, status_w)
        if status_w >= 0:
            os.close(status_w)
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
                line = b"%d" % (128 - code if code < 0 else code)
                if status_r >= 0:
                    reported = os.read(status_r, 64).strip()
                    os.close(status_r)
                    if reported and all(p.isdigit() for p in reported.split()):
                        line = reported
                return line, pending, deadline
        if passed(deadline):
            stop_everything(lock_id, grace_s=0)  # the worker did not renew in time: frozen


def probe_userns() -> int:
    """``--probe-userns``: 0 when a user, mount and PID namespace with a private /proc can
    be made here (the ``--userns`` mechanism, on this kernel and seccomp policy), else 1."""
    import tempfile

    with tempfile.TemporaryDirectory() as keep:
        child = os.fork()
        if child == 0:
            try:
                enter_namespaces(keep, [], [])
                init = os.fork()
                if init == 0:
                    libc, _ = _libc()
                    _mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                    os._exit(0 if os.getpid() == 1 else 1)
                _, status = os.waitpid(init, 0)
                os._exit(os.waitstatus_to_exitcode(status))
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(child, 0)
        return 0 if os.waitstatus_to_exitcode(status) == 0 else 1


def main(args: list[str]) -> int:
    """Run the contract above; ``args`` is ``sys.argv[1:]``."""
    if args == ["--probe-userns"]:
        return probe_userns()
    if (len(args) < 4 or "--" not in args[2:] or os.getpgrp() != os.getpid()
            or not OPTIONS.parse(args[2:args.index("--", 2)])):
        sys.stderr.write("ql3 group wrapper: bad invocation\n")
        return EXIT_BAD_CONTRACT
    argv = args[args.index("--", 2) + 1:]
    if not argv:
        sys.stderr.write("ql3 group wrapper: bad invocation\n")
        return EXIT_BAD_CONTRACT
    watch_fd, lock_fd = int(args[0]), int(args[1])
    WATCH_FD[0] = watch_fd
    for sig in GRACEFUL:
        signal.signal(sig, signal.SIG_IGN)
    os.set_inheritable(watch_fd, False)
    st = os.fstat(lock_fd)
    lock_id = (st.st_dev, st.st_ino)
    line, pending, deadline = run_command(argv, watch_fd, lock_fd, lock_id)
    os.close(lock_fd)  # from now on only leftovers hold the lock
    try:
        os.write(watch_fd, line + b"\n")
    except OSError:
        stop_everything(lock_id)
    code = int(line.split()[0])
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
