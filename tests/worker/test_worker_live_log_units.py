"""The live-log sender's cutting and resync rules (worker/live_log.py; docs/protocols.md §4.2
"Live log chunks (worker)"), against a small in-process control of the worker client's own
transport (httpx.MockTransport) that applies log-chunk's offset rules."""

from __future__ import annotations

import base64
import json
import time
import uuid

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from qinglong.shared import wire
from qinglong.shared.ids import uuid7
from qinglong.worker.client import ControlClient
from qinglong.worker.clock import now as clock_now
from qinglong.worker.fencing import LeaseFence
from qinglong.worker.live_log import LiveLogSender, StreamConfig, _Run, cut_point

LIMIT = wire.MAX_CHUNK_BYTES


def test_a_full_chunk_ends_after_a_newline_in_its_last_16_kib():
    data = b"a" * (LIMIT - 100) + b"\n" + b"b" * 5000
    assert cut_point(data, final=False) == LIMIT - 99


def test_a_full_chunk_without_a_newline_never_splits_a_character():
    data = "汉".encode() * 30000  # 3 bytes each: LIMIT falls inside one
    cut = cut_point(data, final=False)
    assert cut <= LIMIT and cut % 3 == 0
    data[:cut].decode()


def test_a_short_pending_piece_waits_for_its_last_bytes_unless_final():
    data = "进度".encode()[:-1]
    assert cut_point(data, final=False) == 3
    assert cut_point(data, final=True) == len(data)
    assert cut_point(b"\xff\xfe", final=False) == 2  # not UTF-8: as the size says


class _Control:
    """log-chunk as control applies it; ``rewind_to``: the next answer forgets everything
    after that offset (as a replica whose window moved would) and answers 416 with it."""

    def __init__(self) -> None:
        self.end = 0
        self.pieces: list[tuple[int, bytes]] = []
        self.gaps: list[tuple[int, int]] = []
        self.rewind_to: int | None = None

    def _truncate(self, end: int) -> None:
        self.pieces = [(o, d[:max(0, end - o)]) for o, d in self.pieces if o < end]
        self.gaps = [(a, min(b, end)) for a, b in self.gaps if a < end]
        self.end = end

    def handle(self, request: httpx.Request) -> httpx.Response:
        batch = wire.LogChunkBatch.from_json(json.loads(request.content))
        results = []
        for chunk in batch.chunks:
            data = base64.b64decode(chunk.data)
            if self.rewind_to is not None:
                self._truncate(self.rewind_to)
                self.rewind_to = None
                status = 416
            elif chunk.offset == self.end or (chunk.skipped and chunk.offset > self.end):
                if chunk.offset > self.end:
                    self.gaps.append((self.end, chunk.offset))
                self.pieces.append((chunk.offset, data))
                self.end = chunk.offset + len(data)
                status = 200
            else:
                status = 416
            results.append({"attempt_id": chunk.lease.attempt_id, "status": status,
                            "end": self.end})
        return httpx.Response(200, json={"results": results, "flush_ms": 1000})


def _lease() -> wire.LeaseRef:
    return wire.LeaseRef(attempt_id=uuid7(), lease_token=str(uuid.uuid4()), lease_version=1)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=70000), min_size=1, max_size=6),
       st.integers(min_value=0, max_value=5))
def test_every_raw_byte_is_stored_at_its_offset_or_counted_in_a_gap(pieces, rewind_at):
    control = _Control()
    client = ControlClient("http://control", "tok",
                           transport=httpx.MockTransport(control.handle))
    sender = LiveLogSender(client, StreamConfig(flush_ms=10, burst_bytes=300_000,
                                                max_pending_bytes=200_000))
    fence = LeaseFence(clock_now(), 60_000)
    stream = sender.open(_lease(), fence, lambda: None)
    try:
        for index, piece in enumerate(pieces):
            if index == rewind_at:
                control.rewind_to = control.end // 2
            stream.offer(piece)
            time.sleep(0.02)
        sender.finish(stream, clock_now() + 5.0)
    finally:
        sender.close()
        client.close()
    raw = b"".join(pieces)
    assert control.end == len(raw)  # the last chunk (or gap) reaches the raw end
    spans = sorted([(o, o + len(d)) for o, d in control.pieces if d] + control.gaps)
    at = 0
    for start, end in spans:  # stored bytes and gaps tile [0, raw end) exactly
        assert start == at
        at = end
    assert at == len(raw)
    for offset, data in control.pieces:  # each stored byte sits at its raw offset
        assert raw[offset:offset + len(data)] == data


class _Counting(_Control):
    """``_Control`` that keeps each request's decoded chunks, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[list[bytes]] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        batch = wire.LogChunkBatch.from_json(json.loads(request.content))
        self.requests.append([base64.b64decode(c.data) for c in batch.chunks])
        return super().handle(request)


def _until(check, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_line_after_a_quiet_spell_is_sent_at_once_and_a_burst_after_it_is_coalesced(
        monkeypatch):
    """The leading-edge flush (docs/protocols.md §4.2 "Live log chunks (worker)"), on a
    clock the test moves: nothing waits ``flush_ms`` on its own."""
    from qinglong.worker import clock

    at = [1000.0]
    monkeypatch.setattr(clock, "now", lambda: at[0])
    control = _Counting()
    client = ControlClient("http://control", "tok",
                           transport=httpx.MockTransport(control.handle))
    sender = LiveLogSender(client, StreamConfig(flush_ms=1000))
    stream = sender.open(_lease(), LeaseFence(at[0], 600_000), lambda: None)
    try:
        stream.offer("第一行\n".encode())  # the clock stands still: no flush_ms ever passes
        _until(lambda: control.end == len("第一行\n".encode()),
               "a line after a quiet spell waited for flush_ms")
        _until(lambda: not stream.in_flight, "the first answer was not applied")
        burst = b"".join(f"burst {i}\n".encode() for i in range(50))
        for i in range(50):
            stream.offer(f"burst {i}\n".encode())
        at[0] += 0.5  # within flush_ms of the first send: still coalesced
        stream.offer(b"more\n")
        at[0] += 5.0  # a quiet spell: the coalesced burst goes in one request
        _until(lambda: len(control.requests) == 2, "the burst was not sent after flush_ms")
        assert control.requests[1] == [burst + b"more\n"]
        _until(lambda: not stream.in_flight, "the second answer was not applied")
        at[0] += 5.0
        stream.offer(b"after a quiet spell\n")
        _until(lambda: len(control.requests) == 3, "the next line waited for flush_ms")
        sender.finish(stream, at[0] + 5.0)
    finally:
        sender.close()
        client.close()
    assert control.requests == [["第一行\n".encode()], [burst + b"more\n"],
                                [b"after a quiet spell\n"]]


def test_the_sender_sleeps_until_there_is_something_to_send():
    """Idle, or with its only chunk in flight, the sender waits the full second (a send's
    end, an offer and a finish wake it); in a pause it waits for the pause's end, and a
    stream with unsent output wakes it when its coalescing window ends."""
    client = ControlClient("http://control", "tok",
                           transport=httpx.MockTransport(_Control().handle))
    sender = LiveLogSender(client, StreamConfig(flush_ms=200))
    try:
        now = clock_now()
        assert sender._next_wake(now) == 1.0  # idle: no pause pending, nothing unsent
        stream = sender.open(_lease(), LeaseFence(now, 60_000), lambda: None)
        with sender._cond:
            stream.runs.append(_Run(0, b"x", False))  # unsent output, the thread held off
            stream.last_sent = now  # sent just now: the next waits for the window
            stream.in_flight = True
            assert sender._next_wake(now) == 1.0  # its chunk is in flight
            stream.in_flight = False
            assert abs(sender._next_wake(now) - 0.15) < 1e-9  # ¾ of flush_ms after it
            sender._retry_at = now + 0.5
            assert abs(sender._next_wake(now) - 0.5) < 1e-9  # nothing goes before then
            stream.runs.clear()
    finally:
        sender.close()
        client.close()
