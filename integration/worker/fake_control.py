"""A small fake of control's worker routes over real HTTP (shared/wire.py shapes), with
switches a test flips: heartbeat status (503 = unreachable, 409 = lease lost), a forced status
for any route (``force``, e.g. 409 on ``started``, with the error code in ``force_code``),
``revoked`` (every request answered 401, as for a revoked token), ``tokens`` (the bearer
tokens it accepts: a rotation replaces them), cancel, and the attempts the next claim hands
out. Every request decodes with the wire type's strict decoder.
It also serves the presigned PUT target (``/put/<key>``) and records what it received.

``log-chunk`` is implemented as control does it (docs/protocols.md §4.7): per attempt a
stored end; a chunk at the end is appended (200); one past it only when ``skipped`` (the gap
recorded); an acknowledged range replayed answers 200 ``replayed`` with nothing stored twice;
anything else 416 with the stored end; an attempt in ``stale_leases`` gets 409 and nothing is
stored. ``split_next_chunk`` (attempt ids) stores only the first half of that attempt's next
chunk and answers 416 with the new end (the worker must resend from there);
``lose_answers[route]`` applies that many requests and answers 503 (the answer lost on the
wire: the worker's resend is a replay)."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from qinglong.shared import wire
from qinglong.shared.ids import uuid7

TOKEN = "test-token-" + "x" * 20


LEASE_MS = 3000
"""The lease of an attempt handed out by ``make_attempt`` unless a test sets its own (ms).
After it could end, no process of the attempt may run (docs/protocols.md §4.2 "Self-fencing
and the wrapper's watch"): the bound a fencing test holds a worker to, rather than a speed."""


def make_attempt(shell: str, *, timeout_ms: int | None = None, log_limit_bytes: int = 65536,
                 lease_ms: int = LEASE_MS, heartbeat_ms: int = 1000, cwd: str | None = None,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ClaimedAttempt JSON object (not validated: a test may hand out a bad one)."""
    return {
        "lease": {"attempt_id": uuid7(), "lease_token": str(uuid.uuid4()), "lease_version": 1},
        "run_id": uuid7(), "task_id": uuid7(), "task_name": "t", "run_number": 1,
        "attempt_number": 1, "argv": None, "shell": shell, "env": env or {}, "cwd": cwd,
        "timeout_ms": timeout_ms, "log_limit_bytes": log_limit_bytes, "lease_ms": lease_ms,
        "heartbeat_ms": heartbeat_ms,
    }


class LiveLog:
    """What the fake stored of one attempt's live log: ``pieces`` (offset, bytes) appended in
    order, ``gaps`` (from, to) raw ranges not streamed, ``end`` the stored end."""

    def __init__(self) -> None:
        self.end = 0
        self.pieces: list[tuple[int, bytes]] = []
        self.gaps: list[tuple[int, int]] = []

    def data(self) -> bytes:
        """The stored bytes in order (gaps left out)."""
        return b"".join(p for _, p in self.pieces)

    def covers(self, offset: int, data: bytes) -> bool:
        """True when [offset, offset+len) was stored already with exactly these bytes."""
        for start, piece in self.pieces:
            if start <= offset and offset + len(data) <= start + len(piece):
                return piece[offset - start:offset - start + len(data)] == data
        joined = bytearray()
        first = None
        for start, piece in self.pieces:
            if start + len(piece) > offset and start < offset + len(data):
                if first is None:
                    first = start
                elif first + len(joined) != start:
                    return False
                joined += piece
        if first is None or first > offset:
            return False
        return bytes(joined[offset - first:offset - first + len(data)]) == data


class FakeControl:
    """State and switches; ``url`` once started."""

    def __init__(self, lease_ms: int = 3000, heartbeat_ms: int = 1000) -> None:
        self.lease_ms = lease_ms
        self.heartbeat_ms = heartbeat_ms
        self.queue: list[dict[str, Any]] = []
        self.heartbeat_status = 200
        self.cancel = False
        self.force: dict[str, int] = {}  # route -> status answered (after decoding the body)
        self.force_code: dict[str, str] = {}  # route -> error code of the forced answer
        self.revoked = False  # the token was revoked: 401 to everything, recorded
        self.tokens = {TOKEN}  # accepted bearer tokens; any other gets 401, unrecorded
        self.refused: list[tuple[float, str]] = []  # (monotonic s, route) answered 401
        self.lock = threading.Lock()
        self.log: list[tuple[float, str, Any]] = []  # (monotonic s, route, decoded message)
        self.puts: list[tuple[dict[str, str], bytes]] = []
        self.put_status = 200  # the object store's answer to a PUT (503: down; not kept)
        self.put_tries: list[tuple[float, int]] = []  # (monotonic s, status answered)
        self.grant_headers = {"x-amz-meta-ql3-attempt": "a", "content-type":
                              "text/plain; charset=utf-8", "x-amz-checksum-sha256": "AAAA"}
        self.last_ok_heartbeat: dict[str, float] = {}
        # route -> hook(decoded body) run in the server thread before the answer is written
        # (a hook may block or signal the worker: the answer then waits for it)
        self.hooks: dict[str, Callable[[Any], None]] = {}
        self.live: dict[str, LiveLog] = {}  # attempt id -> stored live log
        self.chunk_results: list[tuple[float, str, int, int, int | None]] = []
        # (monotonic s, attempt id, offset, status, end) per chunk answered
        self.stale_leases: set[str] = set()
        self.split_next_chunk: set[str] = set()
        self.lose_answers: dict[str, int] = {}
        self.chunk_flush_ms = 1000
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> FakeControl:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def seen(self, route: str) -> list[Any]:
        with self.lock:
            return [m for _, r, m in self.log if r == route]

    def wait_for(self, route: str, timeout_s: float = 10.0, count: int = 1) -> list[Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.seen(route)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise AssertionError(f"no {route} within {timeout_s} s")

    def live_log(self, attempt_id: str) -> LiveLog:
        with self.lock:
            return self.live.setdefault(attempt_id, LiveLog())

    def _chunk(self, chunk: wire.LogChunk) -> dict[str, Any]:
        aid = chunk.lease.attempt_id
        data = base64.b64decode(chunk.data)
        with self.lock:
            live = self.live.setdefault(aid, LiveLog())
            replayed = False
            if aid in self.stale_leases:
                status, end = 409, None
            elif chunk.offset == live.end or (chunk.skipped and chunk.offset > live.end):
                if chunk.offset > live.end:
                    live.gaps.append((live.end, chunk.offset))
                if aid in self.split_next_chunk and len(data) > 1:
                    self.split_next_chunk.discard(aid)
                    data = data[:len(data) // 2]
                    status = 416
                else:
                    status = 200
                if data:
                    live.pieces.append((chunk.offset, data))
                live.end = chunk.offset + len(data)
                end = live.end
            elif chunk.offset < live.end and live.covers(chunk.offset, data):
                status, end, replayed = 200, live.end, True
            else:
                status, end = 416, live.end
            self.chunk_results.append((time.monotonic(), aid, chunk.offset, status, end))
        return {"attempt_id": aid, "status": status, "end": end, "replayed": replayed}

    def _answer(self, route: str, body: Any) -> tuple[int, Any]:
        hook = self.hooks.get(route)
        if hook is not None:
            hook(body)
        if route == "log-chunk" and route in self.force:
            wire.LogChunkBatch.from_json(body)
            return self.force[route], {"code": self.force_code.get(route, "not_found")}
        if route in self.force:
            self._answer_normally(route, body)  # the body is still decoded strictly
            return self.force[route], {"code": self.force_code.get(route, "lease_conflict")}
        return self._answer_normally(route, body)

    def _answer_normally(self, route: str, body: Any) -> tuple[int, Any]:
        if route == "register":
            wire.WorkerRegistration.from_json(body)
            return 200, {"incarnation_id": uuid7(), "lease_ms": self.lease_ms,
                         "heartbeat_ms": self.heartbeat_ms}
        if route == "claim":
            req = wire.ClaimRequest.from_json(body)
            with self.lock:
                handed, self.queue = self.queue[:req.max_attempts], self.queue[req.max_attempts:]
            return 200, {"attempts": handed}
        if route in ("started", "complete", "stopped"):
            {"started": wire.StartedReport, "complete": wire.CompletionReport,
             "stopped": wire.WorkerStopped}[route].from_json(body)
            return 200, {"ok": True, "replayed": False}
        if route == "heartbeat":
            msg = wire.HeartbeatReport.from_json(body)
            if self.heartbeat_status != 200:
                return self.heartbeat_status, {"code": "x"}
            self.last_ok_heartbeat[msg.lease.attempt_id] = time.monotonic()
            return 200, {"cancel": self.cancel, "lease_ms": self.lease_ms}
        if route == "log-chunk":
            batch = wire.LogChunkBatch.from_json(body)
            return 200, {"results": [self._chunk(c) for c in batch.chunks],
                         "flush_ms": self.chunk_flush_ms}
        if route == "log-upload":
            msg = wire.LogUploadRequest.from_json(body)
            key = "wlog-" + msg.lease.attempt_id
            return 200, {"url": f"{self.url}/put/{key}", "headers": self.grant_headers,
                         "object_key": key, "expires_in_s": 60}
        return 404, {"code": "not_found"}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with fake.lock:
                    status = fake.put_status
                    fake.put_tries.append((time.monotonic(), status))
                    if status == 200:
                        fake.puts.append(({k.lower(): v for k, v in self.headers.items()},
                                          data))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                route = self.path.removeprefix("/v1/worker/")
                if self.headers.get("Authorization") not in {f"Bearer {t}"
                                                             for t in fake.tokens}:
                    with fake.lock:
                        fake.refused.append((time.monotonic(), route))
                    return self._reply(401, {"code": "unauthorized"})
                with fake.lock:
                    fake.log.append((time.monotonic(), route, body))
                if fake.revoked:
                    return self._reply(401, {"code": "unauthorized"})
                status, answer = fake._answer(route, body)
                with fake.lock:
                    lose = fake.lose_answers.get(route, 0)
                    if lose:
                        fake.lose_answers[route] = lose - 1
                if lose:
                    return self._reply(503, {"code": "answer_lost"})
                return self._reply(status, answer)

        return Handler
