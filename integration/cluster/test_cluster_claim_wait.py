"""Claims that wait (docs/protocols.md §4.2 "Claims that wait"), through real ``ql3 control
serve`` replicas on one database: a claim sent with ``QL3-Wire: 2`` and ``QL3-Claim-Wait``
waits at its replica and is woken by a run made on another replica (PostgreSQL NOTIFY); a
draining replica ends its waits at once; a waiting worker stays ``live``; an older worker's
claim is answered at once. The worker side is scripted over HTTP, so every step is seen.

Nothing here asserts a duration: each test waits for a state (``/metrics``' gauge of waiting
claims, an answer) and asserts what the answer holds and how the wait ended.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from cluster_kit import Cluster, Proc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.timeout(240)]

LEASE_MS = 75_000  # lease/3 = 25 s: the longest wait control allows
WAIT = {"QL3-Wire": "2", "QL3-Claim-Wait": "25000"}


@dataclass
class Scene:
    cluster: Cluster
    a: Proc
    b: Proc
    operator: str
    admin: str
    worker_token: str
    http: httpx.Client
    incarnation: str = ""
    answers: list[httpx.Response] = field(default_factory=list)

    def metric(self, proc: Proc, name: str) -> float:
        """One sample of ``proc``'s ``/metrics`` (0 when absent)."""
        text = httpx.get(f"{proc.url}/metrics", timeout=10).text
        found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
        return float(found.group(1)) if found else 0.0

    def claim_in_background(self, headers: dict[str, str]) -> threading.Thread:
        """POST a claim to replica A in a thread; its answer lands in ``answers``."""
        def send() -> None:
            self.answers.append(self.http.post(
                f"{self.a.url}/v1/worker/claim", headers=headers, timeout=60,
                json={"incarnation_id": self.incarnation, "max_attempts": 1}))

        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        return thread

    def waiting_at_a(self) -> bool:
        return self.metric(self.a, "ql3_claims_waiting") >= 1


@pytest.fixture
def scene(cluster: Cluster) -> Iterator[Scene]:
    a = cluster.start_control("c-a", lease_ms=LEASE_MS, heartbeat_ms=10_000)
    b = cluster.start_control("c-b", lease_ms=LEASE_MS, heartbeat_ms=10_000)
    admin = cluster.token("admin")
    token = cluster.token("worker", pool="wait-pool")
    http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    s = Scene(cluster, a, b, cluster.token("operator"), admin, token, http)
    try:
        with cluster.api(b.url or "", admin) as api:
            r = api.post("/v1/tasks", json={"name": "等待任务", "argv": ["true"],
                                            "concurrency_policy": "allow"})
            assert r.status_code == 201, r.text
        r = http.post(f"{a.url}/v1/worker/register",
                      json={"name": "scripted-worker", "labels": {}, "concurrency": 1})
        assert r.status_code == 200, r.text
        s.incarnation = r.json()["incarnation_id"]
        yield s
    finally:
        http.close()


def test_a_waiting_claim_is_woken_by_a_run_made_on_another_replica(scene: Scene) -> None:
    claim = scene.claim_in_background(WAIT)
    assert wait_for(scene.waiting_at_a, 60, 0.1), scene.a.log()[-2000:]
    assert not scene.answers  # nothing to claim yet: it waits
    with scene.cluster.api(scene.b.url or "", scene.operator) as api:
        made = api.post("/v1/tasks/等待任务/run")
    assert made.status_code == 201, made.text
    claim.join(60)
    (answer,) = scene.answers
    assert answer.status_code == 200, answer.text
    (attempt,) = answer.json()["attempts"]
    assert attempt["run_id"] == made.json()["id"]
    assert answer.headers["QL3-Claim-Wait"] == "25000"
    # the wait ended on the NOTIFY from replica B, not on its timer
    assert scene.metric(scene.a, 'ql3_claim_wait_sleeps_total{ended="woken"}') >= 1
    assert scene.metric(scene.a, 'ql3_claim_wait_sleeps_total{ended="timer"}') == 0
    assert scene.metric(scene.a, "ql3_claims_waiting") == 0


def test_a_waiting_worker_is_listed_live_with_its_wait_start_seen(scene: Scene) -> None:
    with scene.cluster.db.connect() as conn:
        before = conn.execute("SELECT now()").fetchone()[0]
    claim = scene.claim_in_background(WAIT)
    assert wait_for(scene.waiting_at_a, 60, 0.1), scene.a.log()[-2000:]
    with scene.cluster.api(scene.b.url or "", scene.admin) as api:
        workers = api.get("/v1/workers").json()["items"]
    (me,) = [w for w in workers if w["id"] == scene.incarnation]
    assert me["state"] == "live" and me["name"] == "scripted-worker"
    with scene.cluster.db.connect() as conn:
        seen = conn.execute("SELECT last_seen_at FROM worker_incarnations WHERE id = %s",
                            (scene.incarnation,)).fetchone()[0]
    assert seen >= before  # set when the wait began
    with scene.cluster.api(scene.b.url or "", scene.operator) as api:  # end the wait
        assert api.post("/v1/tasks/等待任务/run").status_code == 201
    claim.join(60)
    assert [len(a.json()["attempts"]) for a in scene.answers] == [1]


def test_a_draining_replica_answers_its_waiting_claims_at_once(scene: Scene) -> None:
    claim = scene.claim_in_background(WAIT)
    assert wait_for(scene.waiting_at_a, 60, 0.1), scene.a.log()[-2000:]
    scene.a.popen.send_signal(signal.SIGTERM)
    claim.join(60)
    (answer,) = scene.answers
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"attempts": []}
    assert "QL3-Claim-Wait" not in answer.headers  # the worker falls back to its idle poll
    assert scene.a.popen.wait(30) == 0, scene.a.log()[-2000:]


def test_a_claim_without_the_wait_header_is_answered_at_once(scene: Scene) -> None:
    for headers in ({}, {"QL3-Wire": "2"}, {"QL3-Claim-Wait": "25000"}):
        r = scene.http.post(f"{scene.a.url}/v1/worker/claim", headers=headers, json={
            "incarnation_id": scene.incarnation, "max_attempts": 1})
        assert r.status_code == 200 and r.json() == {"attempts": []}, r.text
        assert "QL3-Claim-Wait" not in r.headers
    assert scene.metric(scene.a, 'ql3_claim_wait_sleeps_total{ended="timer"}') == 0
    assert scene.metric(scene.a, 'ql3_claim_wait_sleeps_total{ended="woken"}') == 0
