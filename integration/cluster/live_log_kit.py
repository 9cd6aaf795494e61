"""A scripted worker for live-log tests (docs/protocols.md §4.9): it registers, claims one
attempt, reports it started and sends chunks over real HTTP with a worker token, exactly as
the wire types say, so control's side is tested without the real worker's sender. Also a
raw-read and a Server-Sent Events reader of ``GET /v1/attempts/{id}/log``."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
from cluster_kit import Cluster, wait_for


@dataclass
class Lease:
    """The fence triple as the wire carries it."""

    attempt_id: str
    lease_token: str
    lease_version: int

    def json(self) -> dict[str, Any]:
        return {"attempt_id": self.attempt_id, "lease_token": self.lease_token,
                "lease_version": self.lease_version}


class ScriptedWorker:
    """One incarnation of pool ``default`` (labels zone=a) talking to ``url``."""

    def __init__(self, url: str, token: str, name: str = "scripted") -> None:
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                                 timeout=30)
        r = self.http.post("/v1/worker/register", json={
            "name": name, "labels": {"zone": "a"}, "concurrency": 4})
        assert r.status_code == 200, r.text
        self.incarnation = r.json()["incarnation_id"]

    def claim(self, timeout_s: float = 20) -> Lease:
        """The next queued attempt's lease, reported started."""
        def one() -> dict[str, Any] | None:
            r = self.http.post("/v1/worker/claim", json={"incarnation_id": self.incarnation,
                                                         "max_attempts": 1})
            assert r.status_code == 200, r.text
            got = r.json()["attempts"]
            return got[0] if got else None
        claimed = wait_for(one, timeout_s, 0.2)
        assert claimed is not None, "nothing to claim"
        lease = Lease(**claimed["lease"])
        r = self.http.post("/v1/worker/started", json={"lease": lease.json(), "pid": 4242})
        assert r.status_code == 200, r.text
        return lease

    def send(self, lease: Lease, offset: int, data: bytes, *, skipped: bool = False,
             http: httpx.Client | None = None) -> dict[str, Any]:
        """POST one chunk; the whole answer (``results[0]`` is this chunk's)."""
        r = (http or self.http).post("/v1/worker/log-chunk", json={"chunks": [{
            "lease": lease.json(), "offset": offset,
            "data": base64.b64encode(data).decode(), "skipped": skipped}]})
        assert r.status_code == 200, r.text
        answer: dict[str, Any] = r.json()
        return answer

    def heartbeat(self, lease: Lease) -> int:
        return self.http.post("/v1/worker/heartbeat", json={"lease": lease.json()}).status_code

    @contextlib.contextmanager
    def kept_alive(self, lease: Lease, period_s: float = 0.5) -> Iterator[None]:
        """Heartbeat ``lease`` every ``period_s`` in a thread (its own client) while inside."""
        stop = threading.Event()

        def beat() -> None:
            with httpx.Client(base_url=self.http.base_url, headers=self.http.headers,
                              timeout=10) as http:
                while not stop.wait(period_s):
                    http.post("/v1/worker/heartbeat", json={"lease": lease.json()})

        thread = threading.Thread(target=beat, daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(15)

    def complete(self, lease: Lease, outcome: str = "succeeded", body: bytes | None = None,
                 layout: dict[str, int] | None = None) -> httpx.Response:
        """Upload ``body`` as the final log (presigned PUT) and complete; without a body,
        complete with no log."""
        log = None
        if body is not None:
            log = {"sha256": hashlib.sha256(body).hexdigest(), "size_bytes": len(body),
                   "content_type": "text/plain; charset=utf-8"}
            g = self.http.post("/v1/worker/log-upload", json={"lease": lease.json(),
                                                              "log": log})
            assert g.status_code == 200, g.text
            grant = g.json()
            put = httpx.put(grant["url"], headers=grant["headers"], content=body, timeout=30)
            assert put.status_code == 200, put.text
        report: dict[str, Any] = {"lease": lease.json(), "outcome": outcome,
                                  "exit_code": 0 if outcome == "succeeded" else 1,
                                  "signal": None, "log": log}
        if layout is not None:
            report["layout"] = layout
        return self.http.post("/v1/worker/complete", json=report)


def manual_task(cluster: Cluster, url: str, admin: str, name: str | None = None,
                retention_s: int | None = None) -> str:
    """A manual task (labels zone=a) run now; its run id."""
    name = name or f"live-{secrets.token_hex(3)}"
    spec: dict[str, Any] = {"name": name, "shell": "true", "labels": {"zone": "a"},
                            "max_attempts": 1}
    if retention_s is not None:
        spec["log_retention_s"] = retention_s
    with cluster.api(url, admin) as api:
        r = api.post("/v1/tasks", json=spec)
        assert r.status_code == 201, r.text
        r = api.post(f"/v1/tasks/{name}/run")
        assert r.status_code == 201, r.text
    run_id: str = r.json()["id"]
    return run_id


def raw_read(url: str, token: str, attempt_id: str, **params: Any) -> httpx.Response:
    """``GET /v1/attempts/{id}/log`` with ``params`` (offset, tail, wait…)."""
    return httpx.get(f"{url}/v1/attempts/{attempt_id}/log", params=params,
                     headers={"Authorization": f"Bearer {token}"}, timeout=40)


def read_all_raw(url: str, token: str, attempt_id: str) -> tuple[bytes, list[tuple[int, int]]]:
    """Every servable byte by raw reads from offset 0 until ``complete``: (bytes in order,
    the gaps as (offset, bytes))."""
    out, gaps, offset = bytearray(), [], 0
    for _ in range(10_000):
        r = raw_read(url, token, attempt_id, offset=offset)
        assert r.status_code == 200, r.text
        if int(r.headers["QL3-Log-Gap"]):
            gaps.append((offset, int(r.headers["QL3-Log-Gap"])))
        assert int(r.headers["QL3-Log-Offset"]) == offset + int(r.headers["QL3-Log-Gap"])
        out += r.content
        offset = int(r.headers["QL3-Log-Next"])
        if r.headers["QL3-Log-State"] == "complete":
            return bytes(out), gaps
    raise AssertionError("the log never completed")


def sse_events(url: str, token: str, attempt_id: str, *, last_event_id: int | None = None,
               start: str = "head", timeout_s: float = 30,
               until: int | None = None,
               sink: list[dict[str, Any]] | None = None,
               client: httpx.Client | None = None) -> list[dict[str, Any]]:
    """Read ``?follow=1`` until its ``end`` event, an event whose id reaches ``until``, or
    the stream closes: the events as dicts with ``event``, ``id`` and ``data`` (JSON), or
    ``retry``; appended to ``sink`` (when given) as they arrive. Each call is a new request
    (a stream left early closes its connection); ``client`` spares building an HTTP client
    per call when a test reconnects many times."""
    headers = {"Authorization": f"Bearer {token}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    events: list[dict[str, Any]] = sink if sink is not None else []
    stream = client.stream if client is not None else httpx.stream
    with stream("GET", f"{url}/v1/attempts/{attempt_id}/log",
                params={"follow": 1, "from": start}, headers=headers,
                timeout=timeout_s) as r:
        assert r.status_code == 200, r.read()
        assert r.headers["content-type"].startswith("text/event-stream")
        current: dict[str, Any] = {}
        for line in r.iter_lines():
            if line == "":
                if "data" in current:
                    events.append(current)
                    if current.get("event") == "end" or (
                            until is not None and current.get("id", -1) >= until):
                        return events
                current = {}
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "data":
                current["data"] = json.loads(value)
            elif field == "id":
                current["id"] = int(value)
            elif field == "event":
                current["event"] = value
            elif field == "retry":
                current["retry"] = int(value)
                events.append(current)
                current = {}
    return events
