"""The worker's side of claims that wait (docs/protocols.md §4.2 "Claims that wait"), against
a scripted control (``httpx.MockTransport``): every claim sends ``QL3-Wire: 2`` and
``QL3-Claim-Wait: min(25 s, lease/3)``; after an empty answer in which control says it waited
(the header comes back) the next claim goes out at once; after one without it (an older
control, a draining replica) the worker sleeps its idle poll. The loop's stop event records
each idle sleep instead of sleeping, so nothing here depends on time."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx

from qinglong.shared import wire
from qinglong.shared.ids import uuid7
from qinglong.worker import clock
from qinglong.worker.attempt import RunnerConfig
from qinglong.worker.client import ControlClient
from qinglong.worker.loop import WorkerConfig, WorkerLoop

IDLE_S = 3600.0  # an idle sleep would never end by itself: it is recorded instead


class RecordingStop(threading.Event):
    """The loop's stop event: an idle sleep (``wait`` with IDLE_S) is recorded and ends the
    loop; any other wait (drain bookkeeping) behaves as usual."""

    def __init__(self, idle: list[int], claims: list[Any]) -> None:
        super().__init__()
        self.idle, self.claims = idle, claims

    def wait(self, timeout: float | None = None) -> bool:
        if timeout == IDLE_S:
            self.idle.append(len(self.claims))  # after how many claims it slept
            self.set()
            return True
        return super().wait(timeout)


def test_the_worker_claims_again_at_once_after_a_wait_and_polls_after_a_plain_answer(
        tmp_path: Path) -> None:
    claims: list[dict[str, str]] = []
    waited_answers = 3  # then control answers like an older one, without the header

    def control(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/worker/register":
            return httpx.Response(200, json={"incarnation_id": uuid7(), "lease_ms": 45_000,
                                             "heartbeat_ms": 10_000})
        if path == "/v1/worker/claim":
            claims.append({k: request.headers.get(k, "")
                           for k in ("QL3-Wire", "QL3-Claim-Wait")})
            waited = {"QL3-Claim-Wait": "15000"} if len(claims) <= waited_answers else {}
            return httpx.Response(200, json={"attempts": []}, headers=waited)
        return httpx.Response(200, json={"ok": True})

    client = ControlClient("http://control", "tok", transport=httpx.MockTransport(control))
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    loop = WorkerLoop(client, WorkerConfig(
        name="worker-1", labels={}, concurrency=2, drain_budget_s=1.0,
        runner=RunnerConfig(spool_dir=spool), idle_s=(IDLE_S, IDLE_S)))
    idle: list[int] = []
    loop._stop = RecordingStop(idle, claims)
    assert loop.run() == 0
    assert claims == [{"QL3-Wire": "2", "QL3-Claim-Wait": "15000"}] * (waited_answers + 1)
    assert idle == [waited_answers + 1]  # no idle sleep until the plain empty answer


def test_a_retried_claim_reports_the_send_time_of_the_request_that_was_answered() -> None:
    """A claim whose first try fails on the wire (a replica rolling) and is answered on a
    retry: the send time handed back — the leases' first renewal, from which the worker
    counts its fence — is the retry's, not the first try's. Counting from the first try fenced
    a lease granted after the retry at once (its deadline had passed before it started)."""
    tries: list[float] = []

    def control(request: httpx.Request) -> httpx.Response:
        tries.append(clock.now())
        if len(tries) == 1:
            raise httpx.ConnectError("replica rolling", request=request)
        return httpx.Response(200, json={"attempts": []})

    client = ControlClient("http://control", "tok", transport=httpx.MockTransport(control))
    answered = [0.0]
    client.claim_waiting(
        wire.ClaimRequest(incarnation_id="01a2360c-d667-713a-aa7e-ed14e7d03227",
                          max_attempts=1),
        deadline=clock.now() + 30, wait_ms=0, sent_at=answered)
    assert len(tries) == 2
    assert tries[0] < answered[0] <= tries[1]
