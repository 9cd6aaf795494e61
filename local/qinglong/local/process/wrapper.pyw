"""Qinglong 3 attempt wrapper (DESIGN.md §3.2 start gate, §3.3; ADR-0069 §2).

Never imported by the runtime: the launcher verifies these bytes against ``WRAPPER_SHA256``,
copies them into a sealed memfd and runs ``python -I -S /proc/self/fd/N <argv...>`` as the
leader of a new process group. It imports only os, _signal, fcntl, marshal, time and sys,
because its memory is paid once per running attempt.

Contract (environment, set by the launcher and removed before the user command starts):
``QL3_LAUNCH_RUN_ID``, ``QL3_LAUNCH_ATTEMPT_ID`` (UUIDv7), ``QL3_LAUNCH_GATE_FD`` (read end of
the start gate), ``QL3_LAUNCH_LC_CTYPE`` (``-`` if the user set no LC_CTYPE, else ``=value``:
CPython's locale coercion rewrites LC_CTYPE, this restores the user's own) and
``QL3_RECEIPT_DIR`` (the attempt's private shard), and optionally ``QL3_LAUNCH_LOG_CAP``
(bytes) with ``QL3_LAUNCH_LOG_DIR_FD`` (an fd of the log's directory) and
``QL3_LAUNCH_LOG_NAME`` (the log's file name there), ``QL3_LAUNCH_SECRET_NAMES`` (the names,
comma-separated, of the variables whose values are secrets) and ``QL3_LAUNCH_LIB_FDS`` (sealed
memfds of ``qinglong/shared/output_mask.py`` and ``log_cap.py``, verified by the launcher).
With a cap or secrets the user's stdout/stderr go through a pipe that this wrapper copies
into the log with those two files, compiled here apart from this one (docs/protocols.md §3.3
"Bounded output": secret values become ``***``; past the cap the log keeps its head, a
marker line and its tail).
User argv is ``sys.argv[1:]``.

Order: take the attempt lock -> block on one gate byte -> spawn the user command in this
process group -> forward TERM/INT/HUP once to the group -> wait -> publish the receipt ->
exit with the user's code (128+N for signal N; 127/126 when the command is missing or not
executable, as shells do; a file without a ``#!`` line runs through ``/bin/sh``, as cron's
execvp(3) does). Without the lock, without the gate byte (EOF: the owner died or
abandoned the gate) or after a graceful signal received before the start, no user code runs:
a ``not_started`` receipt is published and the exit code is 125.
"""

import _signal as signal  # type: ignore[import-not-found]  # C module: `signal` pulls enum, ~1 MiB
import fcntl
import marshal
import os
import sys
import time

RECEIPT_FORMAT = "ql3-receipt@v1"
ENV_RUN_ID = "QL3_LAUNCH_RUN_ID"
ENV_ATTEMPT_ID = "QL3_LAUNCH_ATTEMPT_ID"
ENV_GATE_FD = "QL3_LAUNCH_GATE_FD"
ENV_LC_CTYPE = "QL3_LAUNCH_LC_CTYPE"
ENV_RECEIPT_DIR = "QL3_RECEIPT_DIR"
ENV_LOG_CAP = "QL3_LAUNCH_LOG_CAP"
ENV_LOG_DIR_FD = "QL3_LAUNCH_LOG_DIR_FD"
ENV_LOG_NAME = "QL3_LAUNCH_LOG_NAME"
ENV_SECRET_NAMES = "QL3_LAUNCH_SECRET_NAMES"  # noqa: S105 (a variable name)
ENV_LIB_FDS = "QL3_LAUNCH_LIB_FDS"
ENOEXEC = 8  # Linux errno: "Exec format error" (errno, the module, is not worth importing)
STRIPPED_PREFIXES = (b"QL3_RECEIPT_", b"QL3_LAUNCH_")
EXIT_NOT_STARTED = 125
EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LOCK_TRIES = 40  # x 5 ms: tolerate a concurrent non-blocking lock probe (ReceiptStore)
_HEX = frozenset("0123456789abcdef-")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_S_IFMT, _S_IFREG = 0o170000, 0o100000

_phase = "gate"  # gate -> starting -> running -> done
_child = 0
_pending: list[int] = []


class _Cancelled(Exception):
    """A graceful signal arrived before the user command started."""


def encode_receipt(
    run_id: str,
    attempt_id: str,
    identity: tuple[str, int, int, int],
    outcome: str,
    exit_code: int | None,
    sig: int | None,
    finished_at_ms: int,
) -> bytes:
    """Canonical ``ql3-receipt@v1`` bytes, equal to ``CompletionReceipt.encode()``.

    ``identity`` is (boot_id, pid, pgid, start_ticks). Ids must be lowercase UUID text (no
    escaping is needed or done). Built by hand: the wrapper does not import json.
    """

    def num(value: int | None) -> str:
        return "null" if value is None else str(int(value))

    boot_id, pid, pgid, start_ticks = identity
    for text in (run_id, attempt_id, boot_id):
        if len(text) != 36 or not set(text) <= _HEX:
            raise ValueError("receipt ids must be lowercase UUID text")
    if outcome not in ("exited", "signaled", "not_started"):
        raise ValueError("unknown receipt outcome")
    parts = (
        '{"attempt_id":"', attempt_id, '","boot_id":"', boot_id,
        '","exit_code":', num(exit_code), ',"finished_at_ms":', num(finished_at_ms),
        ',"format":"', RECEIPT_FORMAT, '","outcome":"', outcome,
        '","pgid":', num(pgid), ',"pid":', num(pid), ',"run_id":"', run_id,
        '","signal":', num(sig), ',"start_ticks":', num(start_ticks), "}",
    )  # fmt: skip
    return "".join(parts).encode("ascii")


def _read_small(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)


def own_identity() -> tuple[str, int, int, int]:
    """(boot_id, pid, pgid, start_ticks) of this process; field 22 read after the last ')'."""
    boot_id = _read_small("/proc/sys/kernel/random/boot_id").strip()
    fields = _read_small("/proc/self/stat").rpartition(")")[2].split()
    return boot_id, os.getpid(), os.getpgrp(), int(fields[19])


def publish(
    shard_fd: int,
    run_id: str,
    attempt_id: str,
    outcome: str,
    exit_code: int | None,
    sig: int | None,
) -> bool:
    """Publish ``<attempt_id>.receipt`` in the shard; never overwrites; False on any failure.

    Private temp file ``.<attempt_id>.receipt.tmp`` (O_EXCL, 0600; a name the cleanup
    journal derives, as a crash may leave it) -> fsync -> link() to the final name ->
    unlink temp -> fsync the shard directory.
    """
    try:
        finished_at_ms = time.time_ns() // 1_000_000
        data = encode_receipt(
            run_id, attempt_id, own_identity(), outcome, exit_code, sig, finished_at_ms
        )
        tmp = f".{attempt_id}.receipt.tmp"  # = receipt_store.temporary_name
        flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=shard_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            final = attempt_id + ".receipt"
            os.link(tmp, final, src_dir_fd=shard_fd, dst_dir_fd=shard_fd, follow_symlinks=False)
        finally:
            try:
                os.unlink(tmp, dir_fd=shard_fd)
            except OSError:
                pass
        os.fsync(shard_fd)
        return True
    except Exception:
        return False


def _forward(sig: int) -> None:
    """Send ``sig`` once to our own group; the echo to ourselves is discarded (ignored)."""
    pgrp = os.getpgrp()
    try:
        if pgrp > 1 and pgrp == os.getpid():
            previous = signal.signal(sig, signal.SIG_IGN)
            try:
                os.killpg(pgrp, sig)
            finally:
                signal.signal(sig, previous)
        elif _child > 1:
            os.kill(_child, sig)
    except OSError:
        pass


def _on_signal(sig: int, _frame: object) -> None:
    global _phase
    if _phase == "gate":
        _phase = "done"  # raise once: a second signal cannot interrupt the not_started path
        raise _Cancelled(sig)
    if _phase == "starting":
        _pending.append(sig)
    elif _phase == "running":
        _forward(sig)


def _take_lock(shard_fd: int, attempt_id: str) -> int:
    """Exclusive flock on ``<attempt_id>.lock``; the fd is inheritable. -1 if not taken."""
    flags = os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(attempt_id + ".lock", flags, 0o600, dir_fd=shard_fd)
    except OSError:
        return -1
    try:
        if os.fstat(fd).st_mode & _S_IFMT == _S_IFREG:
            for _ in range(LOCK_TRIES):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    time.sleep(0.005)
                    continue
                os.set_inheritable(fd, True)
                return fd
    except OSError:
        pass
    os.close(fd)
    return -1


def _close_others(keep: tuple[int, ...]) -> None:
    """Close every fd >= 3 except ``keep``: the gate, the memfd and anything inherited."""
    top = max(os.sysconf("SC_OPEN_MAX"), max(keep) + 1)
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, top)


def user_environment() -> dict[bytes, bytes]:
    """The user's environment: no QL3_RECEIPT_*/QL3_LAUNCH_*, LC_CTYPE as the user gave it."""
    env = {k: v for k, v in os.environb.items() if not k.startswith(STRIPPED_PREFIXES)}
    marker = os.environb.get(ENV_LC_CTYPE.encode(), b"-")
    if marker.startswith(b"="):
        env[b"LC_CTYPE"] = marker[1:]
    else:
        env.pop(b"LC_CTYPE", None)
    return env


def _spawn(argv: list[str], env: dict[bytes, bytes], out_w: int = -1) -> int:
    """posix_spawnp in our group with default dispositions and an empty signal mask;
    with ``out_w``, the command's stdout and stderr are that pipe."""
    defaults = tuple(s for s in range(1, 32) if s not in (signal.SIGKILL, signal.SIGSTOP))
    actions = [] if out_w < 0 else [
        (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)]
    return os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsigmask=(),
                           setsigdef=defaults)


def _on_path(name: str) -> str:
    """Where ``posix_spawnp`` found ``name``: itself if it has a slash, else the first
    executable regular file of that name on our PATH (the user's), else ``name``."""
    if "/" in name:
        return name
    for folder in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
        candidate = os.path.join(folder or ".", name)
        try:
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
        except OSError:
            continue
    return name


def _start(argv: list[str], env: dict[bytes, bytes], out_w: int = -1) -> int:
    """Spawn the user command; a file the kernel cannot execute (ENOEXEC: a script without
    a ``#!`` line) runs through ``/bin/sh`` as execvp(3) and cron do."""
    try:
        return _spawn(argv, env, out_w)
    except OSError as exc:
        if exc.errno != ENOEXEC:
            raise
    return _spawn(["/bin/sh", _on_path(argv[0]), *argv[1:]], env, out_w)


def _cannot_execute(name: str, exc: OSError, missing: bool) -> bytes:
    """The log line naming the command that could not start and why: not found in PATH
    (a bare name), the OS error for a path, and a hint when the file is there (its ``#!``
    interpreter is missing), and the working directory a relative path was looked up in."""
    why = exc.strerror or str(exc)
    if missing and "/" not in name:
        why = f"not found in PATH={os.environ.get('PATH', '')}"
    elif missing and os.path.lexists(name):
        why += " (the file exists: is the interpreter of its #! line missing?)"
    elif missing and not name.startswith("/"):
        try:
            why += f" (looked up in the working directory {os.getcwd()})"
        except OSError:
            why += " (a relative path; the working directory is gone)"
    return f"ql3-wrapper: cannot execute '{name}': {why}\n".encode("utf-8", "surrogateescape")


def _log_cap() -> int:
    """The log cap in bytes, or 0 (no cap)."""
    text = os.environ.get(ENV_LOG_CAP, "")
    return int(text) if text.isdigit() and int(text) > 0 else 0


def _secret_values() -> list[bytes]:
    """The values of the variables ``QL3_LAUNCH_SECRET_NAMES`` names (read before the
    launch contract is stripped from the user's environment), each whole and each of its
    ``&``- or newline-separated accounts (``JD_COOKIE=ck1&ck2``: scripts print one at a
    time)."""
    names = os.environb.get(ENV_SECRET_NAMES.encode(), b"")
    values = [os.environb[name] for name in names.split(b",") if name in os.environb]
    return values + [part for v in values for part in v.replace(b"\n", b"&").split(b"&")]


def _load_libs() -> dict[str, object]:
    """Run the memfds ``QL3_LAUNCH_LIB_FDS`` names, in order, in one namespace (each fd is
    closed); {} when there are none or one cannot be read. Each holds this interpreter's
    import magic number and the marshalled code the launcher compiled from the verified
    file (compiling here would cost the wrapper ~0.8 MiB of RSS), or else the source."""
    names: dict[str, object] = {"__name__": "ql3_wrapper_output"}
    fds = [int(f) for f in os.environ.get(ENV_LIB_FDS, "").split(",") if f.isdigit()]
    try:
        for fd in fds:
            parts, at = [], 0
            while True:
                data = os.pread(fd, 65536, at)
                if not data:
                    break
                parts.append(data)
                at += len(data)
            data = b"".join(parts)
            magic = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
            if data[:len(magic)] == magic:
                # the launcher's own compile of a verified file, in a sealed memfd
                exec(marshal.loads(data[len(magic):]), names)  # noqa: S102, S302
            else:
                exec(compile(data, f"<ql3-lib-{len(names)}>", "exec"), names)  # noqa: S102
    except (OSError, SyntaxError, ValueError, EOFError, TypeError):
        names = {}
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
    return names if fds else {}


def _pidfd_works() -> bool:
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):
        return False
    return True


def _wait(child: int) -> tuple[int, int | None]:
    """Wait for ``child`` (EINTR is retried); (shell exit code, signal or None)."""
    while True:
        try:
            status = os.waitpid(child, 0)[1]
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status), os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status), None


def _contract() -> tuple[str, str, int, str] | None:
    run_id = os.environ.get(ENV_RUN_ID, "")
    attempt_id = os.environ.get(ENV_ATTEMPT_ID, "")
    gate = os.environ.get(ENV_GATE_FD, "")
    shard = os.environ.get(ENV_RECEIPT_DIR, "")
    for text in (run_id, attempt_id):
        if len(text) != 36 or not set(text) <= _HEX:
            return None
    if not gate.isdigit() or not shard.startswith("/") or len(sys.argv) < 2:
        return None
    return run_id, attempt_id, int(gate), shard


def main() -> int:
    """Run one attempt; returns the wrapper's exit code (see the module docstring)."""
    global _phase, _child
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # an inherited SIG_IGN would auto-reap
    contract = _contract()
    if contract is None:
        os.write(2, b"ql3-wrapper: launch contract missing\n")
        return EXIT_NOT_STARTED
    run_id, attempt_id, gate_fd, shard = contract
    try:
        shard_fd = os.open(shard, _DIR_FLAGS)
    except OSError:
        return EXIT_NOT_STARTED
    lock_fd, opened = -1, False
    try:
        for forwarded in FORWARDED:
            signal.signal(forwarded, _on_signal)
        lock_fd = _take_lock(shard_fd, attempt_id)
        opened = lock_fd >= 0 and len(os.read(gate_fd, 1)) == 1
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        if opened and _phase == "gate":
            _phase = "starting"
    except (_Cancelled, OSError):
        opened = False
    if not opened or _phase != "starting":
        _phase = "done"
        publish(shard_fd, run_id, attempt_id, "not_started", None, None)
        return EXIT_NOT_STARTED
    libs = _load_libs()
    log_dir = os.environ.get(ENV_LOG_DIR_FD, "")
    log_dir_fd = int(log_dir) if log_dir.isdigit() else -1
    _close_others((lock_fd, shard_fd, log_dir_fd) if log_dir_fd > 2 else (lock_fd, shard_fd))
    cap = _log_cap()
    secrets = _secret_values()
    piped = bool(cap or secrets) and "copy_output" in libs and _pidfd_works()
    pipe_r, pipe_w = os.pipe() if piped else (-1, -1)
    try:
        _child = _start(sys.argv[1:], user_environment(), pipe_w)
    except OSError as exc:
        if piped:
            os.close(pipe_r)
            os.close(pipe_w)
        _phase = "done"
        signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        missing = isinstance(exc, FileNotFoundError | NotADirectoryError)
        code = EXIT_NOT_FOUND if missing else EXIT_CANNOT_EXECUTE
        os.write(2, _cannot_execute(sys.argv[1] if len(sys.argv) > 1 else "", exc, missing))
        publish(shard_fd, run_id, attempt_id, "exited", code, None)
        return code
    _phase = "running"
    signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
    while _pending:
        _forward(_pending.pop(0))
    if piped:
        os.close(pipe_w)
        log = libs["CappedLog"](cap, log_dir_fd if log_dir_fd > 2 else -1,  # type: ignore[operator]
                                os.environ.get(ENV_LOG_NAME, "").rpartition("/")[2])
        libs["copy_output"](pipe_r, _child, log, libs["OutputMasker"](secrets))  # type: ignore[operator]
    code, sig = _wait(_child)
    _phase = "done"
    if sig is None:
        publish(shard_fd, run_id, attempt_id, "exited", code, None)
    else:
        publish(shard_fd, run_id, attempt_id, "signaled", None, sig)
    return code


if __name__ == "__main__":
    sys.exit(main())
