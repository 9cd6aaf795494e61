"""The capped, masked copy of a task's output into its log (docs/protocols.md §3.3
"Bounded output"; docs/operations.md §9 "Secrets in output").

Run inside the attempt wrapper, never imported by the runtime (tests import it): the
launcher verifies these bytes against ``LOG_CAP_SHA256``, compiles them and passes the
marshalled code in a sealed memfd; the wrapper runs it, after ``shared/output_mask.py``
(which defines ``OutputMasker``), in one namespace only when the output goes through a pipe.
Compiling it in the wrapper would cost the wrapper ~0.8 MiB of RSS
(tests/process/test_process_log_cap.py holds the peak). Imports only os and select.

Layout: past ``cap`` bytes the log keeps its first H bytes (``cap // 2``, less up to 3 so
the cut never splits a UTF-8 character); the rest of the output goes to a rolling tail on
disk (two alternating anonymous ``O_TMPFILE`` segment files in the log's directory,
``cap - cap // 2 + 3`` bytes each: never a buffer in memory). When the command ends the log
is finished as head, one marker line ``[ql3: N bytes of output left out here]`` (after a
newline if the head does not end with one), then the last ``cap - H`` bytes (less up to 3,
starting at a character boundary); output of at most ``cap`` bytes is kept whole. The
layout is published beside the log as ``<log>.layout``: ``ql3-log-layout@v1 head=H`` at the
cut, then ``ql3-log-layout@v1 head=H tail_from=R tail_at=F`` (raw offset R of the tail's
first byte, at file offset F of the log); a log that never passed the cap has none.
"""

import os
import select

TYPE_CHECKING = False
if TYPE_CHECKING:
    from qinglong.shared.output_mask import OutputMasker

CHUNK = 65536
DRAIN_CHUNKS = 16  # after the command exits, a background writer cannot hold us
LAYOUT_FORMAT = "ql3-log-layout@v1"
LAYOUT_SUFFIX = ".layout"
MARKER = b"[ql3: %d bytes of output left out here]\n"


def write_all(data: bytes, fd: int = 1) -> bool:
    """Write to ``fd`` (the log by default); a failing write (disk full) drops the rest."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except InterruptedError:
            continue
        except OSError:
            return False
    return True


def char_start(data: bytes, index: int) -> int:
    """The largest char boundary <= ``index`` in ``data`` (UTF-8: a byte that is not a
    continuation byte 0b10xxxxxx), backing off at most 3 bytes; ``index`` itself when the
    bytes there are not UTF-8 or ``index`` is at the end."""
    for back in range(4):
        at = index - back
        if at < 0 or at >= len(data):
            return index
        if data[at] & 0xC0 != 0x80:
            return at
    return index




class CappedLog:
    """The log (``out_fd``, the wrapper's fd 1, opened for appending) as head + rolling
    tail on disk (docs/protocols.md §3.3; the module docstring gives the layout).

    ``cap`` bytes (0: no cap, everything is written); ``dir_fd``/``name``: the log's
    directory and file name, where ``<name>.layout`` is published and the anonymous tail
    segments are made (-1: no tail is kept, only the head and the marker). Write failures
    (a full disk) drop bytes and never raise.
    """

    def __init__(self, cap: int, dir_fd: int = -1, name: str = "", out_fd: int = 1) -> None:
        self.cap, self.dir_fd, self.name, self.out = cap, dir_fd, name, out_fd
        self.head_max = cap // 2
        self.seg_max = cap - self.head_max
        self.raw = 0  # raw bytes received
        self.head = -1  # H once the head is cut
        self.last = b""  # the head's last 3 bytes
        self.segs: list[int] = []
        self.seg_len = [0, 0]
        self.cur = 0

    def write(self, data: bytes) -> None:
        """Append ``data`` (raw output) to the log, or past the head to the rolling tail."""
        if not data:
            return
        if self.head >= 0 or not self.cap:
            if self.head < 0:
                write_all(data, self.out)
            else:
                self._to_tail(data)
            self.raw += len(data)
            return
        if self.raw + len(data) <= self.head_max:
            write_all(data, self.out)
            self.raw += len(data)
            self.last = (self.last + data)[-3:]
            return
        window = self.last + data  # raw offset of window[0]: self.raw - len(self.last)
        base = self.raw - len(self.last)
        k = char_start(window, self.head_max - base)
        if k >= len(self.last):
            write_all(window[len(self.last):k], self.out)
        else:  # the cut falls inside a character already written: take its bytes back
            try:  # noqa: SIM105 (contextlib is not worth importing here)
                os.ftruncate(self.out, base + k)
            except OSError:
                pass
        self.head = base + k
        self.last = window[:k][-3:]
        self._start_tail()
        self._to_tail(window[k:])
        self.raw = base + len(window)

    def _start_tail(self) -> None:
        self._publish(f"head={self.head}")
        if self.dir_fd < 0:
            return
        try:
            for _ in range(2):
                self.segs.append(os.open(".", os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600,
                                         dir_fd=self.dir_fd))
        except OSError:  # no O_TMPFILE here: the tail is dropped, the head and marker stay
            for fd in self.segs:
                os.close(fd)
            self.segs = []

    def _to_tail(self, data: bytes) -> None:
        if not self.segs:
            return
        while data:
            room = self.seg_max + 3 - self.seg_len[self.cur]  # + 3: a head cut short
            if room <= 0:
                self.cur ^= 1
                try:
                    os.ftruncate(self.segs[self.cur], 0)
                    os.lseek(self.segs[self.cur], 0, 0)
                except OSError:
                    pass
                self.seg_len[self.cur] = 0
                continue
            piece, data = data[:room], data[room:]
            write_all(piece, self.segs[self.cur])
            self.seg_len[self.cur] += len(piece)

    def finish(self) -> None:
        """Write the marker line and the tail after the head, publish the final layout and
        close the segments. A log that never passed the head is left as it is."""
        if self.head < 0:
            return
        older = self.seg_len[self.cur ^ 1]
        stored = older + self.seg_len[self.cur]  # the last `stored` raw bytes, in order
        keep = min(self.cap - self.head, stored)  # the head and tail fill the cap
        skip = 0
        if self.raw - keep > self.head:  # the tail starts mid-stream: at a char boundary
            first = self._read_tail(stored - keep, 4)
            if len(first) < 4:  # the first bytes straddle the two segments
                first += self._read_tail(stored - keep + len(first), 4 - len(first))
            while skip < min(3, len(first)) and first[skip] & 0xC0 == 0x80:
                skip += 1
            if skip == 3 and len(first) == 4 and first[3] & 0xC0 == 0x80:
                skip = 0  # not UTF-8: cut where the bytes fall
        tail_from = self.raw - keep + skip
        left_out = tail_from - self.head
        marker = b""
        if left_out:
            marker = (b"" if self.last.endswith(b"\n") else b"\n") + MARKER % left_out
            write_all(marker, self.out)
        position = stored - keep + skip
        while position < stored:
            piece = self._read_tail(position, min(CHUNK, stored - position))
            if not piece or not write_all(piece, self.out):
                break
            position += len(piece)
        for fd in self.segs:
            os.close(fd)
        self.segs = []
        if left_out:
            self._publish(f"head={self.head} tail_from={tail_from} "
                          f"tail_at={self.head + len(marker)}")
        else:  # nothing was left out: the log is the raw output, with no layout
            try:  # noqa: SIM105 (contextlib is not worth importing here)
                os.unlink(self.name + LAYOUT_SUFFIX, dir_fd=self.dir_fd)
            except OSError:
                pass

    def _read_tail(self, position: int, size: int) -> bytes:
        """``size`` bytes at ``position`` of the stored tail (older segment, then current)."""
        older = self.seg_len[self.cur ^ 1]
        if not self.segs:
            return b""
        if position < older:
            fd, at, size = self.segs[self.cur ^ 1], position, min(size, older - position)
        else:
            fd, at = self.segs[self.cur], position - older
        try:
            return os.pread(fd, size, at)
        except OSError:
            return b""

    def _publish(self, fields: str) -> None:
        """Replace ``<name>.layout`` atomically (private temporary, then rename)."""
        if self.dir_fd < 0:
            return
        final = self.name + LAYOUT_SUFFIX
        tmp = "." + final + ".tmp"
        flags = os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=self.dir_fd)
            try:
                write_all(f"{LAYOUT_FORMAT} {fields}\n".encode("ascii"), fd)
            finally:
                os.close(fd)
            os.rename(tmp, final, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
        except OSError:
            pass


def copy_output(pipe_r: int, child: int, log: CappedLog, masker: "OutputMasker") -> None:
    """Copy the command's output into ``log`` through ``masker`` until it exits (then at
    most ``DRAIN_CHUNKS`` more reads: a background writer cannot hold us), and finish it."""
    pidfd = os.pidfd_open(child)
    after_exit = -1
    try:
        while after_exit < DRAIN_CHUNKS:
            ready = select.select([pipe_r, pidfd], [], [])[0]
            if pidfd in ready and after_exit < 0:  # the command exited: drain, then stop
                after_exit = 0
                os.set_blocking(pipe_r, False)
            if after_exit >= 0:
                after_exit += 1
            try:
                data = os.read(pipe_r, CHUNK)
            except BlockingIOError:
                break
            if not data:
                break  # every writer closed its end
            log.write(masker.feed(data))
    finally:
        os.close(pidfd)
        os.close(pipe_r)
        log.write(masker.flush())
        log.finish()
