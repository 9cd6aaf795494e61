"""The local output spool of remote attempts (docs/protocols.md §4.2 "Logs").

One private directory (0700, owned by the worker's uid, not a symlink) holds one file per
attempt (``<attempt_id>.log``, created 0600 with ``O_EXCL | O_NOFOLLOW``). A copier thread
moves the attempt's combined stdout+stderr from a pipe into the file; past ``limit_bytes`` it
keeps the head and a rolling tail on disk (``<attempt_id>.tail0``/``.tail1``) with one marker
line between them (``CappedCopier``; docs/protocols.md "Caps (worker)").

A worker killed with SIGKILL leaves ``<attempt_id>.log`` and ``<attempt_id>.lock`` behind.
``adopt_spool_dir`` removes them at start: each worker holds a shared flock on the directory's
``.worker-active`` file for its lifetime, and only a worker that gets it exclusively (no other
live worker uses the directory, so no file there belongs to a running attempt) removes the
files of attempts whose lock no process holds (an escaped process of a killed worker may still
hold one: those files are kept). Only regular files are touched; symlinks are never followed
nor removed. The same goes for the private bundle directories ``work/<attempt_id>`` of
attempts whose lock is free (``spool_dir.remove_stale_checkouts``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import select
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from qinglong.shared import wire
from qinglong.shared.output_mask import OutputMasker
from qinglong.shared.process.path_lock import PathLock
from qinglong.shared.wire import LogLayout
from qinglong.worker import clock
from qinglong.worker.errors import SpoolError
from qinglong.worker.spool_dir import remove_stale_checkouts

CHUNK = 65536
ACTIVE_MARKER = ".worker-active"
SPOOL_SUFFIXES = ("log", "lock", "tail0", "tail1")


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


def marker_line(left_out: int, after_newline: bool) -> bytes:
    """The one line a capped log holds between its head and its tail (docs/protocols.md
    "Caps (worker)"): ``[ql3: N bytes left out]`` and a newline, preceded by a newline when
    the head does not end with one (``after_newline`` false), so the marker is a line of its
    own. ``left_out`` counts raw output bytes, ≥ 1."""
    return (b"" if after_newline else b"\n") + b"[ql3: %d bytes left out]\n" % left_out


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


def _incomplete_suffix(tail: bytes) -> int:
    """How many bytes at the end of ``tail`` (its last ≤ 3 bytes) start a UTF-8 character
    that is not complete in ``tail``: 0 when the end is a character boundary (or the bytes
    are not UTF-8, which no cut can harm)."""
    for back in range(1, min(3, len(tail)) + 1):
        byte = tail[-back]
        if _is_continuation(byte):
            continue
        need = 2 if 0xC2 <= byte <= 0xDF else 3 if 0xE0 <= byte <= 0xEF else (
            4 if 0xF0 <= byte <= 0xF4 else 1)
        return back if need > back else 0
    return 0


@dataclass(frozen=True)
class CapResult:
    """What a finished copier kept: ``raw_bytes`` the task wrote (all of it, before the cap),
    ``layout`` how the spool maps to raw offsets (None when nothing was left out: the spool is
    the raw output, byte for byte)."""

    raw_bytes: int
    layout: LogLayout | None


class CappedCopier:
    """Copies a pipe's read end into the spool, keeping the head and a rolling tail past
    ``limit_bytes`` (docs/protocols.md "Caps (worker)").

    The first ``limit_bytes // 2`` raw bytes go to the spool fd (the head); later bytes go to
    two alternating segment files ``<spool>.tail0`` / ``.tail1`` of ``(limit - head) // 2``
    bytes each (at least 1): when the current one is full the other is emptied and written
    next, so the last full segment plus the current one are always the newest bytes and
    nothing of the tail is held in memory (one 64 KiB read buffer in all). ``finish`` writes
    head, one marker line when bytes were left out (``marker_line``), then the tail, to the
    spool; the head is cut back and the tail started forward to whole UTF-8 characters.
    Further output is always read, so the task never blocks on a full pipe.

    ``masker`` (optional) replaces secret values first (docs/operations.md §9): what the
    cap, the spool and ``on_output`` see, and every offset, is the masked output; the bytes
    it holds back are flushed when the pipe ends. ``on_output(data)`` (optional) sees every
    piece, in order, before the cap (the live stream: attempt.py). Owns both fds and closes
    them. ``finish(drain_s)`` keeps reading what is buffered for at most ``drain_s`` seconds
    (a process that escaped the group may hold the pipe open forever), then assembles the
    spool and returns CapResult. OSError while assembling propagates from ``finish``.
    """

    def __init__(self, pipe_r: int, spool_fd: int, limit_bytes: int,
                 spool_path: Path | None = None,
                 on_output: Callable[[bytes], None] | None = None,
                 masker: OutputMasker | None = None) -> None:
        self._pipe_r = pipe_r
        self._masker = masker
        self._spool_fd = spool_fd
        self._head_limit = limit_bytes // 2
        self._segment = max(1, (limit_bytes - self._head_limit) // 2)
        self._segments = [] if spool_path is None else [
            spool_path.with_name(f"{spool_path.stem}.tail{i}") for i in (0, 1)]
        self._seg_fds: list[int] = []
        self._seg_size = [0, 0]
        self._current = 0
        self._raw = 0
        self._head = 0
        self._head_end = b""  # the head's last ≤ 4 bytes (a UTF-8 cut check)
        self._dropped = 0  # tail bytes overwritten (left out)
        self._on_output = on_output
        self._stop = threading.Event()
        self._done = threading.Event()
        self._drain_s = 0.5
        self._result: CapResult | None = None
        self._thread = threading.Thread(target=self._run, name="ql3-spool", daemon=True)

    @property
    def truncated(self) -> bool:
        """True once output beyond the limit was left out."""
        return self._raw > self._head + sum(self._seg_size)

    @property
    def raw_bytes(self) -> int:
        """Raw output bytes read so far (the live stream's offset space)."""
        return self._raw

    def start(self) -> None:
        """Start the copier thread."""
        self._thread.start()

    def finish(self, drain_s: float = 0.5) -> CapResult | None:
        """Ask the copier to stop after at most ``drain_s`` seconds more; wait for it and
        assemble the spool (once). None when the thread did not end in time."""
        self._drain_s = drain_s
        self._stop.set()
        self._thread.join(drain_s + 1.0)
        if not self._done.is_set():
            return None
        if self._result is None:
            self._result = self._assemble()
        return self._result

    def _write(self, fd: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def _open_segment(self, index: int) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        return os.open(self._segments[index], flags, 0o600)

    def _take(self, data: bytes) -> None:
        if self._on_output is not None:
            self._on_output(data)
        self._raw += len(data)
        room = self._head_limit - self._head
        if room > 0:
            kept = data[:room]
            self._write(self._spool_fd, kept)
            self._head += len(kept)
            self._head_end = (self._head_end + kept)[-4:]
            data = data[room:]
        if not data:
            return
        if not self._segments:  # no segment files: the head alone (unit use)
            self._dropped += len(data)
            return
        if not self._seg_fds:
            self._seg_fds = [self._open_segment(0), self._open_segment(1)]
        view = memoryview(data)
        while view:
            room = self._segment - self._seg_size[self._current]
            if room <= 0:
                self._current ^= 1
                self._dropped += self._seg_size[self._current]
                os.ftruncate(self._seg_fds[self._current], 0)
                os.lseek(self._seg_fds[self._current], 0, os.SEEK_SET)
                self._seg_size[self._current] = 0
                continue
            piece = view[:room]
            self._write(self._seg_fds[self._current], piece)
            self._seg_size[self._current] += len(piece)
            view = view[len(piece):]

    def _assemble(self) -> CapResult:
        """Write marker and tail after the head (or the tail alone when nothing was left
        out); remove the segment files."""
        tail_len = sum(self._seg_size)
        left_out = self._raw - self._head - tail_len
        layout = None
        try:
            order = [self._current ^ 1, self._current]
            skip = 0
            if left_out > 0:
                cut = _incomplete_suffix(self._head_end[-3:])
                if cut:
                    self._head -= cut
                    os.ftruncate(self._spool_fd, self._head)
                    os.lseek(self._spool_fd, 0, os.SEEK_END)
                skip = self._leading_continuations(order)
                tail_len -= skip
                left_out = self._raw - self._head - tail_len
                kept_end = self._head_end[:len(self._head_end) - cut]
                ends_nl = self._head == 0 or kept_end.endswith(b"\n")
                self._write(self._spool_fd, marker_line(left_out, ends_nl))
                layout = LogLayout(raw_bytes=self._raw, head_bytes=self._head,
                                   tail_offset=self._raw - tail_len)
            for index in order:
                if self._seg_size[index] == 0:
                    continue
                self._copy_segment(index, skip)
                skip = max(0, skip - self._seg_size[index])
        finally:
            for fd in self._seg_fds:
                os.close(fd)
            self._seg_fds = []
            for path in self._segments:
                path.unlink(missing_ok=True)
            os.close(self._spool_fd)
        return CapResult(raw_bytes=self._raw, layout=layout)

    def _leading_continuations(self, order: list[int]) -> int:
        """UTF-8 continuation bytes (≤ 3) at the tail's start: left out, so the tail starts
        at a whole character."""
        first = b""
        for index in order:
            if self._seg_size[index]:
                with open(self._segments[index], "rb") as fh:
                    first += fh.read(3)
        count = 0
        for byte in first[:3]:
            if not _is_continuation(byte):
                break
            count += 1
        return count

    def _copy_segment(self, index: int, skip: int) -> None:
        fd = os.open(self._segments[index], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.lseek(fd, min(skip, self._seg_size[index]), os.SEEK_SET)
            while chunk := os.read(fd, CHUNK):
                self._write(self._spool_fd, chunk)
        finally:
            os.close(fd)

    def _run(self) -> None:
        try:
            self._copy()
        finally:
            try:
                rest = self._masker.flush() if self._masker is not None else b""
                if rest:
                    self._take(rest)
            except OSError:
                pass
            finally:
                os.close(self._pipe_r)
                self._done.set()

    def _copy(self) -> None:
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
                if self._masker is not None:
                    data = self._masker.feed(data)
                    if not data:
                        continue
                self._take(data)
        except OSError:
            return


def secret_masker(attempt: wire.ClaimedAttempt) -> OutputMasker | None:
    """A masker of the values of ``attempt.secret_names`` in its env (UTF-8 bytes; values
    under ``MIN_SECRET_BYTES`` are not masked: output_mask.py), or None when there is none
    to mask (docs/operations.md §9). A value that joins several accounts (Qinglong's
    ``JD_COOKIE=ck1&ck2``, or one per line) is masked whole and each part of it too, as
    scripts split it on ``&`` and newlines and print one account at a time."""
    values: list[bytes] = []
    for name in attempt.secret_names:
        if name in attempt.env:
            value = attempt.env[name]
            values.append(value.encode())
            values += [part.encode() for part in value.replace("\n", "&").split("&")]
    masker = OutputMasker(values)
    return masker if masker.secrets else None
