"""A worker given two control replicas survives a clean stop of the one it talks to
(docs/protocols.md §4.2; user report: one ``--control-url`` made the worker's heartbeats fail until
its fence deadline, and the attempt was killed and lost although the other replica was up).

Two real ``ql3 control serve`` replicas on one database, a real ``ql3 worker run`` given both
base URLs (the first is the one it uses), a ``sleep 8`` task running on it; SIGTERM the first
replica: the worker moves to the second, the attempt is never fenced, completes
``succeeded``, and its log is read through the surviving replica.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from cluster_kit import Cluster, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

LEASE_MS, HEARTBEAT_MS = 3000, 1000  # the worker's fence: last renewal + 2 s


def attempts(db: Any, run_id: str) -> list[tuple[str, str, str | None]]:
    rows = db.execute("SELECT id::text, status, reason FROM attempts WHERE run_id = %s "
                      "ORDER BY number", (run_id,)).fetchall()
    return [tuple(r) for r in rows]


def test_sigterm_of_the_workers_replica_moves_it_to_the_other_and_the_attempt_succeeds(
        cluster: Cluster) -> None:
    admin = cluster.token("admin")
    worker_token = cluster.token("worker", pool="default", labels="zone=a")
    c1 = cluster.start_control("c1", lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS)
    c2 = cluster.start_control("c2", lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS)
    assert c1.url and c2.url
    worker = cluster.start_worker("w1", worker_token, f"{c1.url},{c2.url}", concurrency=1)
    api = cluster.api(c2.url, admin)
    db = cluster.db.connect()
    try:
        r = api.post("/v1/tasks", json={"name": "long", "shell": "echo begun; sleep 8; "
                                        "echo finished-after-failover", "max_attempts": 1})
        assert r.status_code == 201, r.text
        r = api.post("/v1/tasks/long/run")
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
        assert wait_for(lambda: [a for a in attempts(db, run_id) if a[1] == "running"], 20), \
            (attempts(db, run_id), worker.log())
        time.sleep(1.5)  # heartbeats flow through c1

        assert c1.terminate(timeout=30) == 0, c1.log()[-2000:]

        assert wait_for(lambda: db.execute("SELECT status FROM runs WHERE id = %s",
                                           (run_id,)).fetchone()[0]  # type: ignore[index]
                        in ("succeeded", "failed", "lost", "cancelled", "timed_out"), 30)
        (attempt,) = attempts(db, run_id)
        assert attempt[1:] == ("succeeded", None), (attempt, worker.log())
        log = api.get(f"/v1/attempts/{attempt[0]}/log")
        assert log.status_code == 200, log.text
        assert "begun" in log.text and "finished-after-failover" in log.text
        wlog = worker.log()
        assert f"control at {c1.url} unreachable" in wlog and f"switching to {c2.url}" in wlog
        for sign in ("lease fenced", "group killed", "lease lost", "not recorded"):
            assert sign not in wlog, wlog
        assert worker.alive()
    finally:
        api.close()
        db.close()
