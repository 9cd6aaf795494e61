"""Reading a local log by raw offset through its cap layout (docs/protocols.md §3.8).

Offsets count the task's output bytes as the wrapper received them (secret values already
masked), before any cap. A log that passed its cap has a ``<log>.layout`` file beside it
(written by ``process/log_cap.py``): ``ql3-log-layout@v1 head=H`` while the command runs
(the file holds the head only), then ``... tail_from=R tail_at=F`` once finished (head, the
marker line, then raw bytes from R at file offset F). Raw bytes H..R were left out: a read
there returns no data and a gap of ``R - offset`` bytes, and the reader goes on at R.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from qinglong.local.process.log_cap import LAYOUT_FORMAT, LAYOUT_SUFFIX

LAYOUT_MAX_BYTES = 256

Reader = Callable[[str, int, int], "bytes | None"]


@dataclass(frozen=True, slots=True)
class LogLayout:
    """Where a capped log's parts are: ``head`` bytes (raw 0..head = file 0..head); once
    finished, raw bytes from ``tail_from`` are at file offset ``tail_at`` (both None while
    the command runs)."""

    head: int
    tail_from: int | None = None
    tail_at: int | None = None


@dataclass(frozen=True, slots=True)
class RawRead:
    """One read: ``data`` from the raw offset asked, ``next_offset`` (raw) and ``gap``, the
    bytes left out by the cap that the read skipped (then ``data`` is empty)."""

    data: bytes
    next_offset: int
    gap: int = 0


def read_layout(path: str) -> LogLayout | None:
    """The layout of the log at ``path``; None when it has none (never passed its cap) or
    the file is not a well-formed layout (then the log is read as it is)."""
    try:
        fd = os.open(path + LAYOUT_SUFFIX, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
                     | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.read(fd, LAYOUT_MAX_BYTES).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    fields = text.split()
    if not fields or fields[0] != LAYOUT_FORMAT or not text.endswith("\n"):
        return None
    values: dict[str, int] = {}
    for item in fields[1:]:
        key, _, value = item.partition("=")
        if not value.isdigit():
            return None
        values[key] = int(value)
    if "head" not in values:
        return None
    return LogLayout(values["head"], values.get("tail_from"), values.get("tail_at"))


def read_raw(read: Reader, path: str, offset: int, size: int) -> RawRead | None:
    """Read up to ``size`` bytes from raw ``offset`` of the log at ``path`` with ``read``
    (path, file offset, size -> bytes, None if missing); None when the log is missing.

    The layout is read before the log, so a log finished meanwhile is read by the layout
    it had: a running log never shows bytes past its head."""
    layout = read_layout(path)
    if layout is None:
        data = read(path, offset, size)
        return None if data is None else RawRead(data, offset + len(data))
    if offset < layout.head:
        data = read(path, offset, min(size, layout.head - offset))
        return None if data is None else RawRead(data, offset + len(data))
    if layout.tail_from is None or layout.tail_at is None:  # running: the tail is not out yet
        return RawRead(b"", offset) if read(path, 0, 0) is not None else None
    if offset < layout.tail_from:
        return RawRead(b"", layout.tail_from, gap=layout.tail_from - offset)
    data = read(path, layout.tail_at + offset - layout.tail_from, size)
    return None if data is None else RawRead(data, offset + len(data))


def raw_offset(path: str, file_offset: int) -> int:
    """The raw offset of byte ``file_offset`` of the log file at ``path`` (the marker line
    maps to the tail's first byte)."""
    layout = read_layout(path)
    if layout is None or file_offset <= layout.head:
        return file_offset
    if layout.tail_from is None or layout.tail_at is None:
        return layout.head
    return layout.tail_from + max(0, file_offset - layout.tail_at)
