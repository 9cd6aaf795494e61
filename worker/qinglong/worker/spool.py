"""The local output spool of remote attempts (docs/protocols.md §4.2 "Logs", issue 11 item 6).

One private directory (0700, owned by the worker's uid, not a symlink) holds one file per
attempt (``<attempt_id>.log``, created 0600 with ``O_EXCL | O_NOFOLLOW``). A copier thread
moves the attempt's combined stdout+stderr from a pipe into the file, keeping at most
``limit_bytes`` and then one marker line; further output is read and discarded so the task
never blocks on a full pipe.
"""

from __future__ import annotations

import hashlib
import os
import select
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from qinglong.worker import clock
from qinglong.worker.errors import SpoolError

CHUNK = 65536
TRUNCATION_MARKER = "\n[ql3: output truncated at {limit} bytes]\n"


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
