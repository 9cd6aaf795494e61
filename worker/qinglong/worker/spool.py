"""The local output spool of remote attempts (docs/protocols.md §4.2 "Logs", issue 11 item 6).

One private directory (0700, owned by the worker's uid, not a symlink) holds one file per
attempt (``<attempt_id>.log``, created 0600 with ``O_EXCL | O_NOFOLLOW``). A copier thread
moves the attempt's combined stdout+stderr from a pipe into the file, keeping at most
``limit_bytes`` and then one marker line; further output is read and discarded so the task
never blocks on a full pipe.

A worker killed with SIGKILL leaves ``<attempt_id>.log`` and ``<attempt_id>.lock`` behind.
``adopt_spool_dir`` removes them at start: each worker holds a shared flock on the directory's
``.worker-active`` file for its lifetime, and only a worker that gets it exclusively (no other
live worker uses the directory, so no file there belongs to a running attempt) removes the
files of attempts whose lock no process holds (an escaped process of a killed worker may still
hold one: those files are kept). Only regular files are touched; symlinks are never followed
nor removed. The same goes for the private bundle directories ``work/<attempt_id>`` of
attempts whose lock is free (``bundles.remove_stale_checkouts``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import select
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from qinglong.shared.process.path_lock import PathLock
from qinglong.worker import clock
from qinglong.worker.errors import SpoolError

CHUNK = 65536
TRUNCATION_MARKER = "\n[ql3: output truncated at {limit} bytes]\n"
ACTIVE_MARKER = ".worker-active"
SPOOL_SUFFIXES = ("log", "lock")


def prepare_spool_dir(path: Path) -> Path:
    """Create (0700) or verify the private spool directory and return its absolute path.

    Raises SpoolError when it is a symlink, not a directory, owned by another uid, or grants
    any permission to group or other.
    """
    path = path.absolute()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise SpoolError(f"spool directory cannot be created ({exc.strerror})") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SpoolError("spool directory is a symlink or not a directory")
    if info.st_uid != os.getuid():
        raise SpoolError("spool directory belongs to another user")
    if info.st_mode & 0o077:
        raise SpoolError("spool directory must be private (0700)")
    return path


def adopt_spool_dir(directory: Path) -> tuple[int, int | None]:
    """Join the prepared spool ``directory`` as a live worker and clear what killed workers
    left behind. Returns (the marker fd, to keep open for the process's lifetime; the number
    of files removed, or None when another live worker uses the directory and nothing was
    touched).

    Raises SpoolError when the marker cannot be opened or locked (a symlink included).
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(directory / ACTIVE_MARKER, flags, 0o600)
    except OSError as exc:
        raise SpoolError(f"spool marker cannot be opened ({exc.strerror})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fcntl.flock(fd, fcntl.LOCK_SH)  # another worker is here: share, touch nothing
            return fd, None
        from qinglong.worker.bundles import remove_stale_checkouts

        removed = remove_stale_checkouts(directory) + remove_stale_spool_files(directory)
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError as exc:
        os.close(fd)
        raise SpoolError(f"spool marker cannot be locked ({exc.strerror})") from None
    return fd, removed


def remove_stale_spool_files(directory: Path) -> int:
    """Remove ``<id>.log`` and ``<id>.lock`` of every attempt whose lock is free or missing;
    the number of files removed. Call it only while no live worker uses ``directory``.

    An attempt is kept whole when its lock is held (PathLock.held) or when either of its
    files is not a regular file (a symlink is neither followed nor removed). Errors on one
    attempt's files (a file vanishing, a probe failing) keep that attempt's files.
    """
    stems: dict[str, list[str]] = {}
    with os.scandir(directory) as entries:
        for entry in entries:
            stem, dot, suffix = entry.name.rpartition(".")
            if dot and stem and not stem.startswith(".") and suffix in SPOOL_SUFFIXES:
                stems.setdefault(stem, []).append(entry.name)
    removed = 0
    for stem, names in stems.items():
        paths = [directory / name for name in names]
        try:
            if not all(stat.S_ISREG(os.lstat(p).st_mode) for p in paths):
                continue
            if PathLock(str(directory / f"{stem}.lock")).held():
                continue
        except OSError:
            continue
        for path in paths:
            try:
                os.unlink(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    continue
            else:
                removed += 1
    return removed


def open_spool_file(directory: Path, attempt_id: str) -> tuple[Path, int]:
    """Create ``<attempt_id>.log`` (0600, O_EXCL | O_NOFOLLOW) and return (path, write fd).

    Raises SpoolError when it exists already (a symlink included) or cannot be created.
    """
    path = directory / f"{attempt_id}.log"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise SpoolError(f"spool file cannot be created ({exc.strerror})") from None
    return path, fd


@dataclass(frozen=True)
class SpoolFacts:
    """SHA-256 (hex) and size (bytes) of a finished spool file."""

    sha256: str
    size_bytes: int


def spool_facts(path: Path) -> SpoolFacts:
    """Hash a finished spool file (opened O_NOFOLLOW). OSError propagates."""
    digest = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return SpoolFacts(digest.hexdigest(), size)


class CappedCopier:
    """Copies a pipe's read end into a spool fd, capped at ``limit_bytes`` (then one marker).

    Owns both fds and closes them when it finishes. ``finish(drain_s)`` stops it: it keeps
    reading what is already buffered for at most ``drain_s`` seconds (a process that escaped
    the group may hold the pipe open forever), then closes.
    """

    def __init__(self, pipe_r: int, spool_fd: int, limit_bytes: int) -> None:
        self._pipe_r = pipe_r
        self._spool_fd = spool_fd
        self._limit = limit_bytes
        self._written = 0
        self._truncated = False
        self._stop = threading.Event()
        self._drain_s = 0.5
        self._thread = threading.Thread(target=self._run, name="ql3-spool", daemon=True)

    @property
    def truncated(self) -> bool:
        """True once output beyond the limit was discarded."""
        return self._truncated

    def start(self) -> None:
        """Start the copier thread."""
        self._thread.start()

    def finish(self, drain_s: float = 0.5) -> None:
        """Ask the copier to stop after at most ``drain_s`` seconds more; wait for it."""
        self._drain_s = drain_s
        self._stop.set()
        self._thread.join(drain_s + 1.0)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._spool_fd, view):]

    def _take(self, data: bytes) -> None:
        room = self._limit - self._written
        if room > 0:
            kept = data[:room]
            self._write(kept)
            self._written += len(kept)
        if len(data) > max(room, 0) and not self._truncated:
            self._truncated = True
            self._write(TRUNCATION_MARKER.format(limit=self._limit).encode())

    def _run(self) -> None:
        deadline: float | None = None
        try:
            while True:
                if self._stop.is_set() and deadline is None:
                    deadline = clock.now() + self._drain_s
                if deadline is not None and clock.now() >= deadline:
                    return
                ready, _, _ = select.select([self._pipe_r], [], [], 0.05)
                if not ready:
                    if deadline is not None:
                        return  # stopping and nothing buffered
                    continue
                data = os.read(self._pipe_r, CHUNK)
                if not data:
                    return
                self._take(data)
        except OSError:
            return
        finally:
            os.close(self._pipe_r)
            os.close(self._spool_fd)
