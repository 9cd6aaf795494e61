"""A small fake of control's worker routes over real HTTP (shared/wire.py shapes), with
switches a test flips: heartbeat status (503 = unreachable, 409 = lease lost), a forced status
for any route (``force``, e.g. 409 on ``started``, with the error code in ``force_code``),
``revoked`` (every request answered 401, as for a revoked token), ``tokens`` (the bearer
tokens it accepts: a rotation replaces them), cancel, and the attempts the next claim hands
out. Every request decodes with the wire type's strict decoder.
It also serves the presigned PUT target (``/put/<key>``) and records what it received."""

from __future__ import annotations

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


def make_attempt(shell: str, *, timeout_ms: int | None = None, log_limit_bytes: int = 65536,
                 lease_ms: int = 3000, heartbeat_ms: int = 1000, cwd: str | None = None,
                 env: dict[str, str] | None = None) -> dict[str, Any]:
    """A ClaimedAttempt JSON object (not validated: a test may hand out a bad one)."""
    return {
        "lease": {"attempt_id": uuid7(), "lease_token": str(uuid.uuid4()), "lease_version": 1},
        "run_id": uuid7(), "task_id": uuid7(), "task_name": "t", "run_number": 1,
        "attempt_number": 1, "argv": None, "shell": shell, "env": env or {}, "cwd": cwd,
        "timeout_ms": timeout_ms, "log_limit_bytes": log_limit_bytes, "lease_ms": lease_ms,
        "heartbeat_ms": heartbeat_ms,
    }


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
        self.grant_headers = {"x-amz-meta-ql3-attempt": "a", "content-type":
                              "text/plain; charset=utf-8", "x-amz-checksum-sha256": "AAAA"}
        self.last_ok_heartbeat: dict[str, float] = {}
        # route -> hook(decoded body) run in the server thread before the answer is written
        # (a hook may block or signal the worker: the answer then waits for it)
        self.hooks: dict[str, Callable[[Any], None]] = {}
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

    def _answer(self, route: str, body: Any) -> tuple[int, Any]:
        hook = self.hooks.get(route)
        if hook is not None:
            hook(body)
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
                    fake.puts.append(({k.lower(): v for k, v in self.headers.items()}, data))
                self.send_response(200)
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
                return self._reply(status, answer)

        return Handler
