"""Live log chunks, worker to control (docs/protocols.md §4.2 "Live log chunks (worker)", §4.9).

One sender thread serves every running attempt of the worker. Each attempt's copier hands it
the raw output (``LiveStream.offer``, offsets counting the task's raw bytes before any cap);
the sender keeps what control has not acknowledged in memory (bounded) and sends, in one
``POST /v1/worker/log-chunk``, one chunk per attempt that has something pending — when an
attempt has a full chunk (64 KiB) pending, or when ¾ of ``flush_ms`` (1 s by default;
control's answer may raise it) has passed since the attempt's last send. That is a
leading-edge flush: output after such a quiet spell goes at once, and what follows a send
is coalesced until that long after it, so a sparse line reaches control within a round
trip, a line of a busy attempt waits at most 750 ms, write → stored stays within
``flush_ms``, and a busy attempt sends at most one chunk per 750 ms (a 416 is answered at
once). A chunk is at most 64 KiB, cut after a
newline in its last 16 KiB, else at a whole UTF-8 character (a partial character at the end
of what is pending waits for its last bytes, unless the attempt is finishing).

Bounded: each attempt has a token bucket (``StreamConfig.rate_bytes_s`` sustained,
``burst_bytes``); output past it, or past ``max_pending_bytes`` unacknowledged in memory, is
not streamed live: the next chunk after it is marked ``skipped`` and control records the gap
(the spool, hence the final object, still holds those bytes up to the cap).

Answers per chunk: 200 stored — the stored end is the next offset to send; 416 the offset was
not control's stored end — resend from the ``end`` given (a chunk after bytes no longer held is
sent ``skipped``); 409 the lease is stale — handled as a 409 on a heartbeat (``on_lost``: the
runner kills the group and forgets the attempt). A 404 to the route (a replica older than live
logs) stops streaming to that base URL, tried again once a minute. No request is retried past
the earliest fence deadline of the attempts it carries, and an attempt whose fence has passed
sends nothing more. ``finish`` sends the attempt's last chunk and stops its stream: the runner
calls it before asking for the log-upload grant; a 409 arriving after that is ignored.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from qinglong.shared import wire
from qinglong.worker import clock
from qinglong.worker.client import ControlClient
from qinglong.worker.errors import (
    ControlRejectedError,
    ControlUnavailableError,
    LeaseLostError,
    WorkerError,
)
from qinglong.worker.fencing import LeaseFence

log = logging.getLogger("qinglong.worker")
NEWLINE_WINDOW = 16 * 1024  # a chunk ends after a newline found in its last 16 KiB
REQUEST_BUDGET_S = 10.0
RETRY_AFTER_ERROR_S = 1.0
MAX_FLUSH_MS = 10_000  # control may slow a chatty worker down, not silence it
# an attempt's sends are at least this share of flush_ms apart: a line waits at most that
# long before its request, so write → stored, round trip included, stays within flush_ms
COALESCE_SHARE = 0.75


@dataclass(frozen=True)
class StreamConfig:
    """``rate_bytes_s`` / ``burst_bytes``: each attempt's token bucket (bytes per second
    sustained, bytes at once); ``max_pending_bytes`` unacknowledged bytes held in memory per
    attempt; ``flush_ms``: an attempt's sends are at least ``COALESCE_SHARE`` of it apart
    (output after a quiet spell that long is sent at once), unless control asks for more;
    ``retry_404_s`` seconds before a base URL that answered 404 to the route is tried
    again."""

    rate_bytes_s: int = 64 * 1024
    burst_bytes: int = 1024 * 1024
    max_pending_bytes: int = 1024 * 1024
    flush_ms: int = 1000
    retry_404_s: float = 60.0


def cut_point(data: bytes | bytearray, final: bool) -> int:
    """How many bytes of ``data`` the next chunk takes (≤ MAX_CHUNK_BYTES): after the last
    newline in the final 16 KiB window of a full chunk, else at a whole UTF-8 character;
    with less than a full chunk, all of it but an incomplete character at the end (all of it
    when ``final``). Bytes that are not UTF-8 are cut where the size says."""
    limit = wire.MAX_CHUNK_BYTES
    if len(data) <= limit:
        if final:
            return len(data)
        return len(data) - _incomplete_end(data)
    newline = data.rfind(b"\n", limit - NEWLINE_WINDOW, limit)
    if newline >= 0:
        return newline + 1
    cut = limit  # data[cut] is the next chunk's first byte: not a continuation byte
    while cut > limit - 3 and 0x80 <= data[cut] <= 0xBF:
        cut -= 1
    return limit if 0x80 <= data[cut] <= 0xBF else cut


def _incomplete_end(data: bytes | bytearray) -> int:
    for back in range(1, min(3, len(data)) + 1):
        byte = data[-back]
        if 0x80 <= byte <= 0xBF:
            continue
        need = 2 if 0xC2 <= byte <= 0xDF else 3 if 0xE0 <= byte <= 0xEF else (
            4 if 0xF0 <= byte <= 0xF4 else 1)
        return back if need > back else 0
    return 0


class TokenBucket:
    """``rate`` tokens (bytes) per second up to ``burst``; starts full."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._at = now

    def take(self, n: int, now: float) -> bool:
        """Take ``n`` tokens if there are that many (then True), else take none (False)."""
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._rate)
        self._at = now
        if n > self._tokens:
            return False
        self._tokens -= n
        return True


class _Run:
    """Contiguous raw bytes from ``offset``; ``skipped``: bytes before it were not streamed
    (its first chunk may start past control's end)."""

    __slots__ = ("data", "offset", "skipped")

    def __init__(self, offset: int, data: bytes, skipped: bool) -> None:
        self.offset = offset
        self.data = bytearray(data)
        self.skipped = skipped

    @property
    def end(self) -> int:
        return self.offset + len(self.data)


class LiveStream:
    """One attempt's stream (made by ``LiveLogSender.open``). ``offer`` is called by the
    copier thread with every raw output piece, in order."""

    def __init__(self, sender: LiveLogSender, lease: wire.LeaseRef, fence: LeaseFence,
                 on_lost: Callable[[], None]) -> None:
        self.lease = lease
        self.fence = fence
        self._sender = sender
        self._on_lost = on_lost
        self._bucket = TokenBucket(sender.config.rate_bytes_s, sender.config.burst_bytes,
                                   clock.now())
        self.runs: deque[_Run] = deque()
        self.raw_end = 0  # raw bytes offered so far
        self.stored_end = 0  # control's stored end, as last answered
        self.gap_open = False  # bytes after the last run were not kept
        self.last_sent: float | None = None  # clock.now() of the last chunk sent; None: never
        self.finishing = False
        self.closed = False
        self.in_flight = False

    @property
    def pending_bytes(self) -> int:
        return sum(len(r.data) for r in self.runs)

    def offer(self, data: bytes) -> None:
        """Take raw output ``data`` (the next bytes after the previous ones)."""
        self._sender.offer(self, data)

    def lost(self) -> None:
        self._on_lost()


class LiveLogSender:
    """The worker's one chunk sender thread (see the module docstring). Thread-safe;
    ``close()`` ends the thread (idempotent)."""

    def __init__(self, client: ControlClient, config: StreamConfig | None = None) -> None:
        self.config = config or StreamConfig()
        self._client = client
        self._cond = threading.Condition()
        self._streams: dict[str, LiveStream] = {}
        self._window_s = self.config.flush_ms * COALESCE_SHARE / 1000.0
        self._disabled_until: dict[str, float] = {}  # base URL -> clock.now() (404)
        self._retry_at = 0.0
        self._closed = False
        self._thread: threading.Thread | None = None

    def open(self, lease: wire.LeaseRef, fence: LeaseFence,
             on_lost: Callable[[], None]) -> LiveStream:
        """Start streaming the attempt of ``lease``; ``on_lost()`` runs on a 409."""
        stream = LiveStream(self, lease, fence, on_lost)
        with self._cond:
            self._streams[lease.attempt_id] = stream
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ql3-live-log",
                                                daemon=True)
                self._thread.start()
        return stream

    def offer(self, stream: LiveStream, data: bytes) -> None:
        """Queue ``data`` of ``stream`` (see ``LiveStream.offer``)."""
        now = clock.now()
        with self._cond:
            start = stream.raw_end
            stream.raw_end += len(data)
            if stream.closed or stream.finishing or stream.fence.expired(now):
                return
            fits = stream.pending_bytes + len(data) <= self.config.max_pending_bytes
            if not (fits and stream._bucket.take(len(data), now)):
                stream.gap_open = True  # not streamed live: the spool keeps it
            elif stream.runs and not stream.gap_open and stream.runs[-1].end == start:
                stream.runs[-1].data += data
            else:
                stream.runs.append(_Run(start, data, skipped=stream.gap_open
                                        or start != stream.stored_end))
                stream.gap_open = False
            self._cond.notify_all()

    def finish(self, stream: LiveStream, deadline: float) -> None:
        """Send what ``stream`` holds (its last chunk, or the gap at its end) until
        acknowledged or ``deadline`` (``clock.now()`` s) or the fence passes, then stop
        streaming the attempt: later answers about it, a 409 included, are ignored."""
        with self._cond:
            stream.finishing = True
            self._cond.notify_all()
            while (self._has_work(stream) or stream.in_flight) and not stream.closed:
                left = min(deadline, stream.fence.deadline) - clock.now()
                if left <= 0 or self._url_disabled(clock.now()):
                    break
                self._cond.wait(min(left, 0.05))
            stream.closed = True
            self._streams.pop(stream.lease.attempt_id, None)

    def discard(self, stream: LiveStream) -> None:
        """Stop streaming the attempt at once, sending nothing more (idempotent)."""
        with self._cond:
            stream.closed = True
            self._streams.pop(stream.lease.attempt_id, None)

    def close(self) -> None:
        """End the sender thread (pending bytes are not sent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(REQUEST_BUDGET_S + 1.0)

    # -- the thread ---------------------------------------------------------------------

    @staticmethod
    def _has_work(stream: LiveStream) -> bool:
        if stream.runs:
            return True
        return stream.finishing and stream.gap_open and stream.stored_end < stream.raw_end

    def _url_disabled(self, now: float) -> bool:
        until = self._disabled_until.get(self._client.current_url)
        return until is not None and now < until

    def _due(self, stream: LiveStream, now: float) -> bool:
        if stream.in_flight or stream.closed or not self._has_work(stream):
            return False
        if stream.finishing or stream.pending_bytes >= wire.MAX_CHUNK_BYTES:
            return True
        # leading edge: at once after a quiet spell, else flush_ms after the last send
        return stream.last_sent is None or now - stream.last_sent >= self._window_s

    def _next_wake(self, now: float) -> float:
        """Seconds (0.01–1) until the sender may have something to send: the earliest end of
        the coalescing window of a stream with unsent output and no chunk in flight (a
        send's end, an offer and a finish notify), never before a pause ends (an error's
        retry, a URL disabled by a 404). A pause already over and a stream in flight are no
        reason to wake: the sender used to wake every 10 ms for them, idle or not
        (bench/README.md "Worker side")."""
        blocked = max(self._retry_at,
                      self._disabled_until.get(self._client.current_url, 0.0)) - now
        waits = [1.0]
        for stream in self._streams.values():
            if (stream.last_sent is not None and not stream.in_flight
                    and self._has_work(stream)):
                waits.append(stream.last_sent + self._window_s - now)
        return min(1.0, max(0.01, blocked, min(waits)))

    def _chunk(self, stream: LiveStream) -> wire.LogChunk | None:
        """The stream's next chunk, or None when all it holds is an incomplete UTF-8
        character still being written."""
        if not stream.runs:  # the end of the output was not streamed: record that gap
            return wire.LogChunk(lease=stream.lease, offset=stream.raw_end, data="",
                                 skipped=True)
        run = stream.runs[0]
        final = stream.finishing or len(stream.runs) > 1
        take = cut_point(run.data, final)
        if take == 0:
            return None
        data = base64.b64encode(bytes(run.data[:take])).decode("ascii")
        return wire.LogChunk(lease=stream.lease, offset=run.offset, data=data,
                             skipped=run.skipped)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                now = clock.now()
                batch: list[tuple[LiveStream, wire.LogChunk]] = []
                if now >= self._retry_at and not self._url_disabled(now):
                    for stream in list(self._streams.values()):
                        if stream.fence.expired(now):
                            stream.runs.clear()
                            stream.gap_open = False
                            continue
                        if self._due(stream, now) and len(batch) < wire.MAX_CLAIM:
                            chunk = self._chunk(stream)
                            if chunk is not None:
                                batch.append((stream, chunk))
                                stream.in_flight = True
                                stream.last_sent = now
                if not batch:
                    self._cond.wait(self._next_wake(now))
                    continue
            self._send(batch)

    def _send(self, batch: list[tuple[LiveStream, wire.LogChunk]]) -> None:
        deadline = min([clock.now() + REQUEST_BUDGET_S]
                       + [s.fence.deadline for s, _ in batch])
        url = self._client.current_url
        answer: wire.LogChunkAnswer | None = None
        try:
            answer = self._client.log_chunk(
                wire.LogChunkBatch(chunks=[c for _, c in batch]), deadline=deadline)
        except ControlRejectedError as exc:
            if exc.status == 404:
                log.warning("control at %s has no live-log route (404): not streaming logs "
                            "there; trying again in %.0f s", url, self.config.retry_404_s)
            else:
                log.warning("live log chunks refused (%s); trying again in %.0f s", exc,
                            self.config.retry_404_s)
            with self._cond:
                self._disabled_until[url] = clock.now() + self.config.retry_404_s
        except (ControlUnavailableError, LeaseLostError) as exc:
            log.debug("live log chunks not sent: %s", exc)
            with self._cond:
                self._retry_at = clock.now() + RETRY_AFTER_ERROR_S
        except WorkerError as exc:
            log.warning("live log chunks not sent: %s", exc)
            with self._cond:
                self._retry_at = clock.now() + RETRY_AFTER_ERROR_S
        with self._cond:
            for stream, _ in batch:
                stream.in_flight = False
            if answer is not None:
                self._apply(batch, answer)
            self._cond.notify_all()

    def _apply(self, batch: list[tuple[LiveStream, wire.LogChunk]],
               answer: wire.LogChunkAnswer) -> None:
        self._window_s = min(MAX_FLUSH_MS, max(self.config.flush_ms, answer.flush_ms)
                             ) * COALESCE_SHARE / 1000.0
        lost: list[LiveStream] = []
        for (stream, chunk), result in zip(batch, answer.results, strict=False):
            if result.attempt_id != chunk.lease.attempt_id or stream.closed:
                continue  # finished (409 after the last chunk is ignored) or not ours
            if result.status == 409:
                stream.closed = True
                self._streams.pop(stream.lease.attempt_id, None)
                lost.append(stream)
                continue
            if result.end is None:
                continue
            if result.status == 416:
                stream.last_sent = None  # resend from control's end at once
            self._acknowledge(stream, result.end)
        for stream in lost:
            log.warning("attempt %s: live log chunk answered 409: lease lost",
                        stream.lease.attempt_id)
            stream.lost()

    @staticmethod
    def _acknowledge(stream: LiveStream, end: int) -> None:
        """Control's stored end is ``end`` (after a 200 or a 416): drop what it holds, and
        mark the next bytes ``skipped`` when they start past it."""
        stream.stored_end = end
        while stream.runs and stream.runs[0].end <= end:
            stream.runs.popleft()
        if stream.runs:
            run = stream.runs[0]
            if run.offset < end:
                del run.data[:end - run.offset]
                run.offset = end
            run.skipped = run.offset > end
        elif stream.gap_open and end >= stream.raw_end:
            stream.gap_open = False
