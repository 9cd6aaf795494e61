"""Raw and followed reads of an attempt's log (docs/protocols.md §4.4 "Raw read" and
"Following", §4.9).

``raw_answer``: ``GET /v1/attempts/{id}/log?offset=N|tail=K[&wait=S]`` → 200
``application/octet-stream``, the bytes from the first available raw offset ≥ N (≤ 1 MiB),
headers ``QL3-Log-Offset``, ``QL3-Log-Gap``, ``QL3-Log-Next``, ``QL3-Log-State``
(``running``/``complete``), ``QL3-Attempt-Status`` and ``QL3-Log-Partial`` (``1`` when the
log is the chunk rows of an ended attempt without a stored log: it may be incomplete). With
S > 0 and nothing new while running it waits (woken by the replica's LISTEN fan-out,
re-reading every 2 s, holding no pooled connection) until bytes arrive or S passes.

``follow_answer``: ``GET …/log?follow=1[&from=head|tail]`` → ``text/event-stream``. Each
event: ``id`` the end offset (the next byte wanted), data JSON ``{"o": start, "t": text}``
(invalid UTF-8 replaced for display; a character cut by a chunk boundary waits for its
rest). ``Last-Event-ID`` resumes at that offset. A follower whose offset lies in a gap gets
one ``gap`` event (``{"o": asked, "n": bytes}``, id the offset after the gap). The last
event, ``end``, carries ``status``, ``exit_code``, ``signal``, ``reason``, ``duration_s`` and
``partial``. A comment line every 15 s keeps proxies open and re-checks the token (revoked:
the stream ends after an ``error`` event); a replica that drains ends streams with
``retry: 1000``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from qinglong.control.livelog.hub import hub_of
from qinglong.control.livelog.read import LogGoneError, RawSlice, read_raw

if TYPE_CHECKING:
    from qinglong.control.api.context import ApiContext

MAX_WAIT_S = 25.0
HEARTBEAT_S = 15.0
FOLLOW_TAIL_BYTES = 64 * 1024
EVENT_BYTES = 64 * 1024
RETRY_MS = 1000


def slice_headers(piece: RawSlice) -> dict[str, str]:
    """The ``QL3-*`` headers of one raw answer."""
    return {"QL3-Log-Offset": str(piece.offset), "QL3-Log-Gap": str(piece.gap),
            "QL3-Log-Next": str(piece.next),
            "QL3-Log-State": "complete" if piece.complete else "running",
            "QL3-Attempt-Status": piece.status, "QL3-Log-Partial": "1" if piece.partial
            else "0", "Cache-Control": "no-store"}


async def raw_answer(ctx: ApiContext, attempt_id: str, *, offset: int | None,
                     tail: int | None, wait_s: float) -> Response:
    """The raw read (module docstring). Raises LogGoneError like ``read_raw``."""
    hub = hub_of(ctx.extras)
    deadline = time.monotonic() + min(max(wait_s, 0.0), MAX_WAIT_S)
    event = hub.wakeups.register(attempt_id)
    try:
        while True:
            piece = await run_in_threadpool(read_raw, ctx.engine, ctx.s3, attempt_id,
                                            offset=offset, tail=tail)
            left = deadline - time.monotonic()
            if piece.body or piece.gap or piece.complete or piece.partial or left <= 0 \
                    or hub.draining.is_set():
                break
            offset, tail = piece.next, None
            await hub.wakeups.wait(event, left)
    finally:
        hub.wakeups.unregister(attempt_id, event)
    return Response(piece.body, media_type="application/octet-stream",
                    headers=slice_headers(piece))


def _utf8_cut(data: bytes) -> int:
    """The length of ``data`` without a trailing incomplete UTF-8 sequence (0–3 bytes)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 == 0x80:
            continue  # a continuation byte: look further back for the lead
        need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else \
            4 if byte & 0xF8 == 0xF0 else 1
        return len(data) - back if need > back else len(data)
    return len(data)


def _event(kind: str | None, data: dict[str, Any], event_id: int | None) -> bytes:
    lines = []
    if kind:
        lines.append(f"event: {kind}")
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.append("data: " + json.dumps(data, ensure_ascii=False, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode("utf-8")


async def follow_answer(ctx: ApiContext, attempt_id: str, *, start: int | None,
                        from_head: bool, token_ok: Any) -> StreamingResponse:
    """The Server-Sent Events stream (module docstring). ``start``: the ``Last-Event-ID``
    offset, or None to begin at the head (``from_head``) or the last 64 KiB. ``token_ok``:
    a blocking callable, True while the request's token is still valid. The first read
    happens before the stream starts, so a missing or retired log raises LogGoneError (the
    route answers 404 / 410 / 503); a read that fails later ends the stream after an
    ``error`` event."""
    hub = hub_of(ctx.extras)
    offset: int | None = 0 if start is None and from_head else start
    tail = None if offset is not None else FOLLOW_TAIL_BYTES
    first = await run_in_threadpool(read_raw, ctx.engine, ctx.s3, attempt_id,
                                    offset=offset, tail=tail, limit=EVENT_BYTES)

    async def events() -> AsyncIterator[bytes]:
        piece: RawSlice | None = first
        offset = first.offset - first.gap
        beat_at = time.monotonic() + HEARTBEAT_S
        event = hub.wakeups.register(attempt_id)
        try:
            while True:
                if piece is None:
                    try:
                        piece = await run_in_threadpool(read_raw, ctx.engine, ctx.s3,
                                                        attempt_id, offset=offset,
                                                        limit=EVENT_BYTES)
                    except LogGoneError as exc:
                        yield _event("error", {"code": exc.kind}, None)
                        return
                if piece.gap:
                    yield _event("gap", {"o": piece.offset - piece.gap, "n": piece.gap},
                                 piece.offset)
                body = piece.body
                # a character cut at the live end or at the event size waits for its rest;
                # before a gap (nothing contiguous follows) the bytes go as they are, and so
                # does the last slice of a complete log (nothing follows: the end event's
                # offset must be the log's end, never short of a cut character)
                held = not piece.complete and (len(body) >= EVENT_BYTES
                                               or piece.next >= piece.end)
                keep = _utf8_cut(body) if held else len(body)
                offset = piece.offset + keep
                if keep:
                    yield _event(None, {"o": piece.offset, "t": body[:keep].decode(
                        "utf-8", "replace")}, offset)
                if piece.complete:
                    yield _event("end", {**piece.final, "partial": piece.partial}, offset)
                    return
                if hub.draining.is_set():
                    yield f"retry: {RETRY_MS}\n\n".encode()
                    return
                more = keep and offset < piece.end
                piece = None
                if more:
                    continue  # more is already stored: read on without waiting
                now = time.monotonic()
                if now >= beat_at:
                    if not await run_in_threadpool(token_ok):
                        yield _event("error", {"code": "unauthenticated"}, None)
                        return
                    yield b": heartbeat\n\n"
                    beat_at = now + HEARTBEAT_S
                await hub.wakeups.wait(event, beat_at - now)
        finally:
            hub.wakeups.unregister(attempt_id, event)

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
