"""Appending live log chunks under the lease (docs/protocols.md §4.9 "Chunk protocol").

Each chunk is one short transaction: lock the attempt row with the heartbeat's lease
predicate (``lock_log_lease``: live status, unexpired by the database clock, the caller's
pool), compare its start with the stored end ``attempts.log_end``, insert the row(s), move the
end, trim the window, and NOTIFY (``pg_notify``, delivered on commit). Recovery's
``lose_attempt`` waits for that lock, so an append and a recovery never interleave: a chunk
lands before the attempt is lost, or is answered 409 after.

Per chunk (``LogChunkResult``):

- 409, ``end`` None: the lease is not live (stale, recovered, another pool's); nothing stored.
- 200 ``replayed``: ``[offset, offset + n)`` lies within ``[0, end)``: acknowledged before
  (its answer was lost); answered as the first time (``end = offset + n``); nothing stored.
- 416 with the stored end: ``offset`` is not the end (a hole, or a partial overlap), or lies
  past it without ``skipped``; nothing stored.
- 200: stored. A ``skipped`` chunk past the end first records ``[end, offset)`` as a gap row.

Window (``WINDOW_BYTES``, 8 MiB of data per attempt): rows starting before ``HEAD_BYTES``
(1 MiB) are the head and stay; past the window, the oldest rows after the head are dropped
(down to ``WINDOW_BYTES - TRIM_SLACK_BYTES``, so trimming runs about once per 512 KiB) and
their range becomes one gap row (the dropped middle, its byte count its length).
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.livelog.statements import sql
from qinglong.shared.wire import LogChunk, LogChunkAnswer, LogChunkBatch, LogChunkResult

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

WINDOW_BYTES = 8 * 1024 * 1024
HEAD_BYTES = 1024 * 1024
TRIM_SLACK_BYTES = 512 * 1024
NOTIFY_MIN_INTERVAL_S = 0.1
FLUSH_MS = 1000
SLOW_FLUSH_MS = 5000
REPLICA_BUDGET_BYTES_PER_S = 16 * 1024 * 1024


class ByteBudget:
    """A replica's live-log byte budget: a token bucket of ``rate`` bytes per second (burst
    ``rate``). ``take(n)`` spends n bytes and returns False once the bucket is empty (the
    answer then asks for ``SLOW_FLUSH_MS``). The bytes are stored either way: the worker's
    own per-attempt rate limit (64 KiB/s sustained, burst 1 MiB) bounds what arrives."""

    def __init__(self, rate: int = REPLICA_BUDGET_BYTES_PER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._rate, self._clock = rate, clock
        self._tokens, self._at = float(rate), clock()
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        """Spend ``n`` bytes; True while within budget."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self._rate),
                               self._tokens + (now - self._at) * self._rate) - n
            self._at = now
            return self._tokens >= 0


class NotifyGate:
    """At most one NOTIFY per attempt per ``NOTIFY_MIN_INTERVAL_S`` (docs/protocols.md §4.9
    "Wake-ups"). ``due(attempt_id)`` is True when this append may notify now; otherwise the
    caller schedules a deferred one (``pending``), sent once the interval has passed."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def due(self, attempt_id: str) -> bool:
        """True (and remembered) when the attempt's last NOTIFY is older than the interval."""
        with self._lock:
            now = self._clock()
            if now - self._last.get(attempt_id, -1e9) < NOTIFY_MIN_INTERVAL_S:
                return False
            self._last[attempt_id] = now
            if len(self._last) > 10_000:  # forget attempts not heard of for a while
                self._last = {k: v for k, v in self._last.items() if now - v < 60}
            return True

    def wait_s(self, attempt_id: str) -> float:
        """Seconds until the attempt may notify again (0 when it may now)."""
        with self._lock:
            left = NOTIFY_MIN_INTERVAL_S - (self._clock() - self._last.get(attempt_id, -1e9))
        return max(0.0, left)


@dataclass
class AppendOutcome:
    """One batch's answer plus the attempts whose NOTIFY was held back by the gate (the
    caller sends those after ``NotifyGate.wait_s``) and every (attempt, end) stored now (for
    the in-process fan-out)."""

    answer: LogChunkAnswer
    deferred: dict[str, int]
    stored: dict[str, int]


def append_batch(engine: Engine, *, pool_id: str, batch: LogChunkBatch, gate: NotifyGate,
                 budget: ByteBudget) -> AppendOutcome:
    """Apply ``batch``'s chunks in order, one transaction each (module docstring).

    Returns the answer (one result per chunk; ``flush_ms`` ``SLOW_FLUSH_MS`` when the
    replica's budget is spent, else ``FLUSH_MS``). Database errors pass through (the route
    answers 5xx; the worker resends from its last acknowledged offset)."""
    results: list[LogChunkResult] = []
    deferred: dict[str, int] = {}
    stored: dict[str, int] = {}
    within = True
    for chunk in batch.chunks:
        data = base64.b64decode(chunk.data, validate=True)
        with engine.begin() as conn:
            result, changed = _append_one(conn, pool_id, chunk, data)
            if changed:
                assert result.end is not None
                stored[result.attempt_id] = result.end
                if gate.due(result.attempt_id):
                    run_named(conn, sql("notify"),
                              {"payload": f"{result.attempt_id} {result.end}"})
                    deferred.pop(result.attempt_id, None)
                else:
                    deferred[result.attempt_id] = result.end
        if changed:
            within = budget.take(len(data)) and within
        results.append(result)
    return AppendOutcome(LogChunkAnswer(results=results,
                                        flush_ms=FLUSH_MS if within else SLOW_FLUSH_MS),
                         deferred, stored)


def notify_end(engine: Engine, attempt_id: str, end: int) -> None:
    """A deferred NOTIFY of ``attempt_id``'s end (its own short transaction). A database
    error is swallowed: followers re-read every 2 s anyway."""
    try:
        with engine.begin() as conn:
            run_named(conn, sql("notify"), {"payload": f"{attempt_id} {end}"})
    except Exception:  # noqa: S110 - a lost wake-up costs at most one re-read period
        pass


def _append_one(conn: Connection, pool_id: str, chunk: LogChunk,
                data: bytes) -> tuple[LogChunkResult, bool]:
    lease = chunk.lease
    attempt_id = lease.attempt_id
    row = run_named(conn, sql("lock_log_lease"), {
        "attempt_id": attempt_id, "lease_token": lease.lease_token,
        "lease_version": lease.lease_version, "pool_id": pool_id}).first()
    if row is None:
        return LogChunkResult(attempt_id, 409, None), False
    end, window = int(row[0]), int(row[1])
    start, stop = chunk.offset, chunk.offset + len(data)
    if start < end:
        if stop <= end:
            return LogChunkResult(attempt_id, 200, stop, replayed=True), False
        return LogChunkResult(attempt_id, 416, end), False
    if start > end and not chunk.skipped:
        return LogChunkResult(attempt_id, 416, end), False
    if start == stop == end:
        return LogChunkResult(attempt_id, 200, end), False
    if start > end:
        run_named(conn, sql("insert_chunk"), {"attempt_id": attempt_id, "start": end,
                                             "end": start, "gap": True, "data": b""})
    if data:
        run_named(conn, sql("insert_chunk"), {"attempt_id": attempt_id, "start": start,
                                             "end": stop, "gap": False, "data": data})
    window += len(data)
    if window > WINDOW_BYTES:
        window = _trim(conn, attempt_id, window)
    run_named(conn, sql("set_log_end"), {"attempt_id": attempt_id, "end": stop,
                                        "window": window})
    return LogChunkResult(attempt_id, 200, stop), True


def _trim(conn: Connection, attempt_id: str, window: int) -> int:
    """Drop the oldest rows after the head until the window holds at most
    ``WINDOW_BYTES - TRIM_SLACK_BYTES``; their range becomes one gap row. The new size."""
    target = WINDOW_BYTES - TRIM_SLACK_BYTES
    first: int | None = None
    stop = 0
    while window > target:
        rows = run_named(conn, sql("window_tail_rows"), {
            "attempt_id": attempt_id, "head": HEAD_BYTES if first is None else stop,
            "limit": 512}).all()
        if len(rows) <= 1:
            break  # never drop the newest row
        for start, row_end, gap in rows[:-1]:
            if first is None:
                first = int(start)
            stop = int(row_end)
            if not gap:
                window -= int(row_end) - int(start)
            if window <= target:
                break
    if first is not None and stop > first:
        run_named(conn, sql("drop_range"), {"attempt_id": attempt_id, "start": first,
                                           "stop": stop})
        run_named(conn, sql("insert_chunk"), {"attempt_id": attempt_id, "start": first,
                                             "end": stop, "gap": True, "data": b""})
    return window
