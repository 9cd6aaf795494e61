"""Each request's token check and its pooled connection, through two real ``ql3 control serve``
replicas on one database (docs/protocols.md §4.5):

- a revoked token is refused at its next request on every replica, by the database clock
  (the worker routes read the token row inside the step's own transaction; the other routes
  before it), also once a pending revocation comes due;
- a pooled connection ended by ``pg_terminate_backend`` between requests is replaced when the
  next transaction begins, before any statement of the request was sent: the request
  succeeds;
- a connection lost after the transaction's first statement answers 503
  ``database_unavailable``, and nothing of the step was applied or repeated.

Nothing here waits on time: each step waits for a state (a backend gone, a backend waiting
on a lock) and asserts answers and rows.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest
from cluster_kit import Cluster, Proc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.timeout(240)]

TASK = "令牌任务"


@dataclass
class Scene:
    cluster: Cluster
    a: Proc
    b: Proc
    admin: str
    operator: str
    worker: str
    incarnation: str

    def call(self, proc: Proc, token: str, method: str, path: str,
             json: Any = None) -> httpx.Response:
        return httpx.request(method, f"{proc.url}{path}", json=json, timeout=30,
                             headers={"Authorization": f"Bearer {token}"})

    def claim(self, proc: Proc) -> httpx.Response:
        return self.call(proc, self.worker, "POST", "/v1/worker/claim",
                         {"incarnation_id": self.incarnation, "max_attempts": 1})

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.cluster.db.connect() as conn:
            conn.autocommit = True
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def backends(self, proc: Proc) -> list[int]:
        """PIDs of ``proc``'s pooled connections (its LISTEN session is named apart)."""
        return [r[0] for r in self.sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s", (f"ql3-control:{proc.name}",))]


@pytest.fixture
def scene(cluster: Cluster) -> Scene:
    a = cluster.start_control("c-a", lease_ms=60_000, heartbeat_ms=10_000)
    b = cluster.start_control("c-b", lease_ms=60_000, heartbeat_ms=10_000)
    admin, operator = cluster.token("admin"), cluster.token("operator")
    worker = cluster.token("worker", pool="token-pool")
    with cluster.api(a.url or "", admin) as api:
        r = api.post("/v1/tasks", json={"name": TASK, "argv": ["true"],
                                        "concurrency_policy": "allow"})
        assert r.status_code == 201, r.text
    r = httpx.post(f"{a.url}/v1/worker/register", timeout=30,
                   headers={"Authorization": f"Bearer {worker}"},
                   json={"name": "scripted-worker", "labels": {}, "concurrency": 1})
    assert r.status_code == 200, r.text
    return Scene(cluster, a, b, admin, operator, worker, r.json()["incarnation_id"])


def _token_id(scene: Scene, name_prefix: str) -> str:
    listed = scene.call(scene.a, scene.admin, "GET", "/v1/tokens").json()
    (found,) = [t["id"] for t in listed if t["name"].startswith(name_prefix)
                and not t["revoked_at"]]
    return str(found)


def test_a_revoked_token_is_refused_at_its_next_request_on_both_replicas(scene: Scene) -> None:
    for proc in (scene.a, scene.b):  # both replicas have served both tokens
        assert scene.claim(proc).status_code == 200
        assert scene.call(proc, scene.operator, "GET", "/v1/tasks").status_code == 200
    worker_id, operator_id = _token_id(scene, "worker-"), _token_id(scene, "operator-")
    r = scene.call(scene.a, scene.admin, "POST", f"/v1/tokens/{worker_id}/revoke")
    assert r.status_code == 200, r.text
    r = scene.call(scene.b, scene.admin, "POST", f"/v1/tokens/{operator_id}/revoke")
    assert r.status_code == 200, r.text
    for proc in (scene.b, scene.a):
        refused = scene.claim(proc)
        assert (refused.status_code, refused.json()["error"]["code"]) == (
            401, "unauthenticated"), proc.name
        refused = scene.call(proc, scene.operator, "GET", "/v1/tasks")
        assert refused.status_code == 401, proc.name
    # every worker route refuses it, before looking at its body
    for path in ("/v1/worker/started", "/v1/worker/heartbeat", "/v1/worker/log-upload",
                 "/v1/worker/complete", "/v1/worker/register", "/v1/worker/stopped"):
        refused = scene.call(scene.b, scene.worker, "POST", path, {})
        assert refused.status_code == 401, (path, refused.text)


def test_a_pending_revocation_takes_effect_by_the_database_clock_on_both_replicas(
        scene: Scene) -> None:
    worker_id = _token_id(scene, "worker-")
    scene.sql("UPDATE api_tokens SET revoked_at = now() + interval '1 hour' WHERE id = %s",
              (worker_id,))
    for proc in (scene.a, scene.b):
        assert scene.claim(proc).status_code == 200, proc.name
    scene.sql("UPDATE api_tokens SET revoked_at = now() - interval '1 second' WHERE id = %s",
              (worker_id,))
    for proc in (scene.a, scene.b):
        assert scene.claim(proc).status_code == 401, proc.name


def test_a_pooled_connection_ended_between_requests_is_replaced_before_the_request(
        scene: Scene) -> None:
    for _ in range(3):  # the replica's pool now holds idle connections
        assert scene.claim(scene.a).status_code == 200
        assert scene.call(scene.a, scene.operator, "GET", "/v1/tasks").status_code == 200
    before = scene.backends(scene.a)
    assert before
    scene.sql("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (before,))
    assert wait_for(lambda: not set(before) & set(scene.backends(scene.a)), 30, 0.05)
    for _ in range(3):  # each request may meet one of the ended connections first
        claimed = scene.claim(scene.a)
        assert claimed.status_code == 200, claimed.text
        listed = scene.call(scene.a, scene.operator, "GET", "/v1/tasks")
        assert listed.status_code == 200, listed.text
    assert not set(before) & set(scene.backends(scene.a))


def test_a_connection_lost_after_the_first_statement_answers_503_and_applies_nothing(
        scene: Scene) -> None:
    made = scene.call(scene.a, scene.operator, "POST", f"/v1/tasks/{TASK}/run")
    assert made.status_code == 201, made.text
    (attempt,) = scene.claim(scene.a).json()["attempts"]
    report = {"lease": attempt["lease"], "pid": 4242}
    answers: list[httpx.Response] = []
    with psycopg.connect(scene.cluster.db.runtime_url) as holder:
        # the started step reads the token, then waits on the attempt row this lock holds
        holder.execute("SELECT 1 FROM attempts WHERE id = %s FOR UPDATE",
                       (attempt["lease"]["attempt_id"],))
        sender = threading.Thread(target=lambda: answers.append(scene.call(
            scene.a, scene.worker, "POST", "/v1/worker/started", report)), daemon=True)
        sender.start()

        def blocked() -> list[tuple[Any, ...]]:
            return scene.sql(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
                " AND wait_event_type = 'Lock'", ("ql3-control:c-a",))

        assert wait_for(lambda: bool(blocked()), 30, 0.05), scene.a.log()[-2000:]
        ((pid,),) = blocked()
        scene.sql("SELECT pg_terminate_backend(%s)", (pid,))
        sender.join(60)
        holder.rollback()
    (answer,) = answers
    assert (answer.status_code, answer.json()["error"]["code"]) == (
        503, "database_unavailable"), answer.text
    assert scene.sql("SELECT status, started_at FROM attempts WHERE id = %s",
                     (attempt["lease"]["attempt_id"],)) == [("claimed", None)]
    again = scene.call(scene.a, scene.worker, "POST", "/v1/worker/started", report)
    assert again.status_code == 200 and again.json()["replayed"] is False, again.text
    assert scene.sql("SELECT count(*) FROM events WHERE attempt_id = %s"
                     " AND kind = 'attempt_running'",
                     (attempt["lease"]["attempt_id"],)) == [(1,)]
