"""Exactly once across control replicas (issue 11, Tests; docs/protocols.md §4.2): three real
``ql3 control serve`` replicas tick one every-second task for 30 s on one PostgreSQL; every
slot from the task's first to the ledger's last has exactly one outcome in the occurrence
ledger, no slot has two, and every ``run_created`` row is exactly one run of that slot. Then
the same while one replica is SIGKILLed in the middle (its transaction in flight, if any, is
rolled back by PostgreSQL; the two others carry on). A worker drains the runs (``true``), so
most slots create a run rather than ``backlog_full``: the unique (task, slot) insert is
exercised by three replicas on every slot.

A control replica SIGKILLed while workers claim from it: every run still ends terminal, no
attempt has two outcomes, and the surviving replica recovers the dead one's leases.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime

import httpx
import pytest
from cluster_kit import Cluster, Proc, wait_for
from slot_ledger import assert_every_slot_once, read_ledger

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

WINDOW_S = 30  # the bound: 30 s of ticking per scenario
TERMINAL = {"succeeded", "failed", "lost", "cancelled", "timed_out"}


def _every_second_task(cluster: Cluster, control: Proc, admin: str) -> str:
    """An every-second task (policy allow: a slot whose previous run still waits is
    ``backlog_full``); returns its id."""
    with cluster.api(control.url or "", admin) as api:
        r = api.post("/v1/tasks", json={
            "name": "tick", "argv": ["true"], "schedule": "* * * * * *",
            "concurrency_policy": "allow"})
    assert r.status_code == 201, r.text
    task_id: str = r.json()["id"]
    return task_id


def _db_now(cluster: Cluster) -> datetime:
    with cluster.db.connect() as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def _three_replicas(cluster: Cluster) -> list[Proc]:
    controls = [cluster.start_control(f"c{i}", wait=False) for i in (1, 2, 3)]
    for control in controls:
        cluster.wait_ready(control)
    return controls


def test_three_replicas_fire_every_second_slot_exactly_once_for_30_s(
        cluster: Cluster) -> None:
    admin = cluster.token("admin")
    controls = _three_replicas(cluster)
    worker = cluster.start_worker("w1", cluster.token("worker", pool="p1"),
                                  controls[0].url or "", concurrency=4)
    task_id = _every_second_task(cluster, controls[1], admin)

    time.sleep(WINDOW_S)
    stopped_at = _db_now(cluster)
    assert worker.terminate() == 0, worker.log()[-3000:]
    for control in controls:
        assert control.terminate() == 0, control.log()[-3000:]

    outcomes = assert_every_slot_once(read_ledger(cluster, task_id), stopped_at,
                                      WINDOW_S - 5)
    assert outcomes["run_created"] >= 1, outcomes
    assert set(outcomes) <= {"run_created", "backlog_full"}, outcomes


def test_every_slot_once_while_one_of_three_replicas_is_sigkilled_midway(
        cluster: Cluster) -> None:
    admin = cluster.token("admin")
    controls = _three_replicas(cluster)
    worker = cluster.start_worker("w1", cluster.token("worker", pool="p1"),
                                  controls[0].url or "", concurrency=4)
    task_id = _every_second_task(cluster, controls[1], admin)

    time.sleep(WINDOW_S / 3)
    controls[2].kill()  # SIGKILL: no drain; a tick in flight dies with its connection
    time.sleep(WINDOW_S - WINDOW_S / 3)
    stopped_at = _db_now(cluster)
    assert worker.terminate() == 0, worker.log()[-3000:]
    for control in controls[:2]:
        assert control.alive(), control.log()[-3000:]
        assert control.terminate() == 0, control.log()[-3000:]

    outcomes = assert_every_slot_once(read_ledger(cluster, task_id), stopped_at,
                                      WINDOW_S - 5)
    assert outcomes["run_created"] >= 1, outcomes
    assert set(outcomes) <= {"run_created", "backlog_full"}, outcomes


def _queue_runs(api: httpx.Client, n: int) -> tuple[str, list[str]]:
    """A task of one-second attempts (up to 5, quick retries) and ``n`` queued runs of it."""
    r = api.post("/v1/tasks", json={
        "name": "work", "shell": "sleep 1", "concurrency_policy": "allow",
        "max_attempts": 5, "retry_backoff_ms": 200, "retry_backoff_cap_ms": 1000})
    assert r.status_code == 201, r.text
    task_id = str(r.json()["id"])
    run_ids = []
    for _ in range(n):
        r = api.post("/v1/tasks/work/run")
        assert r.status_code == 201, r.text
        run_ids.append(r.json()["id"])
    return task_id, run_ids


def test_a_control_replica_sigkilled_while_workers_claim_from_it_loses_nothing(
        cluster: Cluster) -> None:
    admin, pool = cluster.token("admin"), cluster.token("worker", pool="p1")
    c1 = cluster.start_control("c1", lease_ms=3000, heartbeat_ms=1000, wait=False)
    c2 = cluster.start_control("c2", lease_ms=3000, heartbeat_ms=1000, wait=False)
    cluster.wait_ready(c1)
    cluster.wait_ready(c2)
    with cluster.api(c2.url or "", admin) as api:
        task_id, run_ids = _queue_runs(api, 30)
    w1 = cluster.start_worker("w1", pool, c1.url or "", concurrency=4)

    def leased_through_c1() -> int:
        with cluster.db.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM attempts a JOIN worker_incarnations w"
                " ON w.id = a.worker_incarnation_id WHERE w.name = 'w1'").fetchone()
        return int(row[0]) if row else 0

    # w1 claims steadily from c1; c1 dies with leases of w1 live (a claim may be in
    # flight: its transaction dies with c1's connections)
    assert wait_for(lambda: leased_through_c1() >= 6, 30), w1.log()[-3000:]
    c1.kill()
    cluster.start_worker("w2", pool, c2.url or "", concurrency=4)

    def all_terminal() -> bool:
        with cluster.db.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status NOT IN"
                " ('succeeded', 'failed', 'lost', 'cancelled', 'timed_out'))"
                " FROM runs WHERE task_id = %s", (task_id,)).fetchone()
        return row is not None and row[0] == 0

    assert wait_for(all_terminal, 45, 0.25), (w1.log()[-2000:], c2.log()[-2000:])
    w1.kill()  # its control is gone: nothing left to report (a SIGTERM would wait for it)

    with cluster.db.connect() as conn:
        runs = dict(conn.execute(
            "SELECT id::text, status FROM runs WHERE task_id = %s", (task_id,)).fetchall())
        attempts = conn.execute(
            "SELECT a.id::text, a.status, a.reason, w.name FROM attempts a"
            " JOIN runs r ON r.id = a.run_id"
            " JOIN worker_incarnations w ON w.id = a.worker_incarnation_id"
            " WHERE r.task_id = %s", (task_id,)).fetchall()
        outcomes = Counter(row[0] for row in conn.execute(
            "SELECT e.attempt_id::text FROM events e JOIN runs r ON r.id = e.run_id"
            " WHERE r.task_id = %s AND e.kind IN ('attempt_completed', 'attempt_lost')",
            (task_id,)).fetchall())
        finished = Counter(row[0] for row in conn.execute(
            "SELECT e.run_id::text FROM events e JOIN runs r ON r.id = e.run_id"
            " WHERE r.task_id = %s AND e.kind IN ('run_finished', 'run_lost')",
            (task_id,)).fetchall())
        live = conn.execute(
            "SELECT count(*) FROM attempts WHERE status IN ('claimed', 'starting', 'running')"
            " AND lease_expires_at < now()").fetchone()

    assert sorted(runs) == sorted(run_ids)
    assert set(runs.values()) <= TERMINAL, Counter(runs.values())
    # every attempt has exactly one outcome; every run exactly one end
    assert {a[0] for a in attempts} == set(outcomes), "an attempt without an outcome event"
    assert all(n == 1 for n in outcomes.values()), outcomes.most_common(3)
    assert set(finished) == set(runs) and all(n == 1 for n in finished.values())
    assert live is not None and live[0] == 0
    # w1's leases granted by c1 that were live at the kill: recovered by c2 as lost, the
    # runs retried by w2; nothing of w1 completed twice or after it was lost
    lost_w1 = [a for a in attempts if a[3] == "w1" and a[1] == "lost"]
    by_w2 = [a for a in attempts if a[3] == "w2"]
    assert lost_w1, "no lease of w1 was live when its control replica died"
    assert by_w2, "the surviving replica handed out no work"
    assert Counter(runs.values())["succeeded"] == len(runs), Counter(runs.values())
