"""HA failover drill (issue 14 item 3; marker ``drill``): the leader node of a Patroni cluster
crashes while the cluster profile works on it, and nothing is lost or done twice.

Three PostgreSQL members under Patroni with etcd on loopback ports, ``synchronous_mode`` on
(no acknowledged commit may be lost); two real ``ql3 control serve`` replicas reach the
database through one multi-host conninfo (``target_session_attrs=read-write``), two real
``ql3 worker run`` processes talk to them (each given both URLs). Two tasks fire every
second (a quick one, and a 4-second one that is running when the node dies), workers run
them, and retention retires every log at once (``log_retention_s`` 0). Then the leader
node crashes: SIGKILL of its Patroni and its postmaster. Its leader key lives for Patroni's
ttl (20 s, the floor), then the synchronous standby is promoted; control's pool drops the
dead connections and libpq finds the new leader.

Verdict, from the database, the S3 server and the process table (``failover_verdict.py``):
no slot fired twice or missing from the occurrence ledger, no attempt completed twice, no
process of an expired lease alive, no claim stuck after its lease, no tombstone lost, no
object deleted twice, every run terminal at the end, and every commit the probe writer saw
acknowledged present on the new leader. The JSON with the seconds from the crash to the
first successful claim and to ``/readyz`` ready again is printed and written to
``<tmp>/failover.json`` (goal ≤ 30 s with the 20 s ttl floor; reported, not asserted).
Database timestamps and wall-clock readings compare directly: every member runs on this
host, so ``now()`` is this host's clock.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import failover_verdict as verdict
import httpx
import psycopg
import pytest
from cluster_kit import Cluster, ClusterDb, Proc, pg_url, wait_for
from drill_probes import AckedWriter, ProcessSampler, ReadinessWatch
from patroni_kit import TTL_S, PatroniCluster
from s3_services import CREDS, FaultProxy, new_bucket
from slot_ledger import assert_every_slot_once, read_ledger

from qinglong.control.retention.objects import make_client

pytestmark = [pytest.mark.integration, pytest.mark.drill, pytest.mark.timeout(480)]

LEASE_MS, HEARTBEAT_MS = 6000, 2000  # a worker fences an attempt 5 s after its last renewal:
# well inside the outage (the leases running at the crash are cut), yet room for a log upload
# on a loaded machine
BEFORE_CRASH_S = 10  # steady work before the crash
AFTER_RECOVERY_S = 10  # steady work after both replicas are ready again
RECOVERY_BOUND_S = 90  # the new leader, a claim and both replicas ready, or the drill fails
SETTLE_BOUND_S = 60  # every run terminal after the tasks are disabled
RETENTION_BOUND_S = 100  # every log retired: a claim cut by the crash waits out its 60 s lease
TASKS = {
    "tick": {"shell": "echo tick", "concurrency_policy": "allow", "max_attempts": 3},
    "slow": {"shell": "echo begun; sleep 4; echo done", "concurrency_policy": "forbid",
             "max_attempts": 2},
}


def _api(url: str, token: str, method: str, path: str, *, bound_s: float = 60,
         **kwargs: Any) -> httpx.Response:
    """One API call, repeated while control answers 503 (the database is away) or cannot
    be reached, at most ``bound_s`` seconds."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            r = httpx.request(method, f"{url}{path}", timeout=10,
                              headers={"Authorization": f"Bearer {token}"}, **kwargs)
            if r.status_code != 503 or time.monotonic() > deadline:
                return r
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def _query(url: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    """The first column of the first row, or None when the database cannot answer now."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
            row = conn.execute(sql, params).fetchone()
    except psycopg.Error:
        return None
    return row[0] if row else None


def _start_world(cluster: Cluster) -> tuple[list[Proc], list[Proc], str, dict[str, str]]:
    """Two control replicas, two workers (each given both replicas), the two tasks."""
    admin, pool = cluster.token("admin"), cluster.token("worker", pool="drill")
    controls = [cluster.start_control(name, lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS,
                                      wait=False) for name in ("c1", "c2")]
    for control in controls:
        cluster.wait_ready(control, timeout=60)
    c1, c2 = (c.url or "" for c in controls)
    workers = [cluster.start_worker("w1", pool, f"{c1},{c2}", concurrency=3),
               cluster.start_worker("w2", pool, f"{c2},{c1}", concurrency=3)]
    task_ids = {}
    for name, spec in TASKS.items():
        r = _api(c1, admin, "POST", "/v1/tasks", json={
            "name": name, "schedule": "* * * * * *", "retry_backoff_ms": 200,
            "retry_backoff_cap_ms": 1000, "log_retention_s": 0, **spec})
        assert r.status_code == 201, r.text
        task_ids[name] = str(r.json()["id"])
    return controls, workers, admin, task_ids


def _crash_leader(ha: PatroniCluster, db: ClusterDb, slow_task: str) -> tuple[str, float]:
    """Wait for an attempt of the slow task that started within the last 2 s (so it is
    still running when the node dies, and its lease is cut), check that a synchronous
    standby confirms commits, crash the leader node. Returns (its name, the wall time just
    after the crash)."""
    fresh = ("SELECT count(*) FROM attempts a JOIN runs r ON r.id = a.run_id"
             " WHERE r.task_id = %s AND a.status = 'running'"
             " AND a.started_at > now() - interval '2 s'")
    assert wait_for(lambda: _query(db.owner_url, fresh, (slow_task,)), 20, 0.1), \
        "no attempt of the slow task is running to be cut by the crash"
    old = ha.leader()
    assert old is not None, ha.topology()
    sync = [m["name"] for m in ha.topology() if m["role"] == "sync_standby"]
    assert len(sync) == 1, ha.topology()  # synchronous_mode: one standby confirms commits
    ha.crash(old)
    return old.name, time.time()


def _await_recovery(ha: PatroniCluster, db: ClusterDb, old: str, crashed_at: float,
                    watch: ReadinessWatch, controls: list[Proc], workers: list[Proc]
                    ) -> float:
    """A new leader, a claim committed after the crash (its ``claimed_at``, epoch seconds,
    is returned) and every replica ready again after having reported the outage; each
    within ``RECOVERY_BOUND_S`` or AssertionError."""
    new = wait_for(lambda: (getattr(ha.leader(), "name", old)) != old, RECOVERY_BOUND_S, 0.5)
    assert new, (ha.topology(), [m.log()[-2000:] for m in ha.members])
    first_claim = wait_for(lambda: _query(
        db.owner_url, "SELECT extract(epoch FROM min(claimed_at)) FROM attempts"
        " WHERE claimed_at > to_timestamp(%s)", (crashed_at,)), RECOVERY_BOUND_S, 0.25)
    assert first_claim, [w.log()[-2000:] for w in workers]
    assert wait_for(lambda: all(watch.outage(c.name, crashed_at)[1] for c in controls),
                    RECOVERY_BOUND_S, 0.5), [c.log()[-2000:] for c in controls]
    return float(first_claim)


def _wind_down(db: ClusterDb, admin: str, controls: list[Proc], workers: list[Proc],
               task_ids: dict[str, str]) -> None:
    """Disable the tasks, let every run end, stop the workers (exit 0), let retention
    retire every log, stop the replicas (alive until now, exit 0). The waits are bounded
    and not asserted: the verdict counts what did not end."""
    for name in TASKS:
        r = _api(controls[1].url or "", admin, "POST", f"/v1/tasks/{name}/disable")
        assert r.status_code == 200, r.text
    all_ended = ("SELECT count(*) = 0 FROM runs WHERE task_id = ANY(%s::uuid[])"
                 " AND status NOT IN ('succeeded','failed','lost','cancelled','timed_out')")
    wait_for(lambda: _query(db.owner_url, all_ended, (list(task_ids.values()),)),
             SETTLE_BOUND_S, 0.5)
    for worker in workers:
        assert worker.alive(), worker.log()[-3000:]
        assert worker.terminate() == 0, worker.log()[-3000:]
    wait_for(lambda: _query(db.owner_url, "SELECT count(*) = 0 FROM"
                            " run_attempt_log_retention_controls"), RETENTION_BOUND_S, 1)
    for control in controls:
        assert control.alive(), control.log()[-3000:]  # rode out the outage, no crash loop
        assert control.terminate() == 0, control.log()[-3000:]


def test_leader_node_crash_loses_and_duplicates_nothing(
        ha_postgres: PatroniCluster, s3_behind_proxy: tuple[str, FaultProxy],
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    began = time.monotonic()
    ha, (s3_endpoint, proxy) = ha_postgres, s3_behind_proxy
    db = ClusterDb.create(ha.hosts, ha.conninfo_params)  # removed with the HA cluster
    writer = AckedWriter(pg_url("postgres", "postgres", ha.hosts, ha.conninfo_params))
    bucket = new_bucket(make_client(s3_endpoint, timeout_s=5, **CREDS), versioned=True)
    cluster = Cluster(tmp_path, db, proxy.endpoint, bucket)  # S3 through the proxy
    try:
        controls, workers, admin, task_ids = _start_world(cluster)
        watch = ReadinessWatch({c.name: c.url or "" for c in controls})
        sampler = ProcessSampler([tmp_path / f"spool-{w.name}" for w in workers],
                                 {w.popen.pid for w in workers})
        probes = [writer, watch, sampler]
        for probe in probes:
            probe.start()
        try:
            time.sleep(BEFORE_CRASH_S)
            old, crashed_at = _crash_leader(ha, db, task_ids["slow"])
            first_claim = _await_recovery(ha, db, old, crashed_at, watch, controls, workers)
            time.sleep(AFTER_RECOVERY_S)
            _wind_down(db, admin, controls, workers, task_ids)
        finally:
            for probe in probes:
                probe.stop()
        report, disabled = _report(db, bucket, s3_endpoint, proxy, task_ids, sampler, writer)
    finally:
        cluster.close()

    outages = {c.name: watch.outage(c.name, crashed_at) for c in controls}
    report.update({
        "patroni_ttl_s": TTL_S, "synchronous_mode": True, "old_leader": old,
        "new_leader": getattr(ha.leader(), "name", None),
        "crash_to_first_claim_s": round(first_claim - crashed_at, 2),
        "crash_to_ready_s": round(max(up for _, up in outages.values() if up) - crashed_at, 2),
        "crash_to_not_ready_s": {n: round(d - crashed_at, 2) if d else None
                                 for n, (d, _) in outages.items()},
        "acked_writes_after_crash": sum(1 for _, at in writer.acked if at > crashed_at),
        "crash_to_first_write_s": round(writer.outage(crashed_at) or -1, 2),
        "wall_s": round(time.monotonic() - began, 1)})
    text = json.dumps(report, indent=1, sort_keys=True)
    (tmp_path / "failover.json").write_text(text)
    with capsys.disabled():  # in the CI log whether the drill passes or not
        print(f"\nfailover drill ({tmp_path / 'failover.json'}):\n{text}")
    _assert_clean(report)
    for tid in task_ids.values():  # the cluster tier's own exactly-once verdict agrees
        assert_every_slot_once(read_ledger(cluster, tid), disabled[tid], min_slots=30)


def _report(db: ClusterDb, bucket: str, s3_endpoint: str, proxy: FaultProxy,
            task_ids: dict[str, str], sampler: ProcessSampler, writer: AckedWriter
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The verdict's counts, read in one snapshot of the database, and when each task was
    disabled (task id -> timestamp)."""
    s3 = make_client(s3_endpoint, timeout_s=10, **CREDS)
    with psycopg.connect(db.owner_url, connect_timeout=10) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        disabled = dict(conn.execute(
            "SELECT task_id::text, max(at) FROM task_events WHERE kind = 'disabled'"
            " GROUP BY task_id").fetchall())
        return {
            "ledger": {name: verdict.ledger(conn, tid, disabled[tid])
                       for name, tid in task_ids.items()},
            "dispatch": verdict.attempts(conn, list(task_ids.values())),
            "processes": verdict.expired_lease_processes(conn, sampler.samples),
            "retention": verdict.retention(conn, s3, bucket, proxy.deletes()),
            "acked_writes": len(writer.acked), "acked_writes_lost": len(writer.lost()),
            "writer_errors": writer.errors,
        }, disabled


def _assert_clean(report: dict[str, Any]) -> None:
    """Zero lost or duplicated outcomes, and evidence that the drill hit what it claims."""
    faults = {f"ledger.{name}.{key}": part[key] for name, part in report["ledger"].items()
              for key in ("duplicated_slots", "missing_slots", "runs_per_slot")}
    for section, keys in (
            ("dispatch", ("attempts_completed_twice", "attempts_without_outcome",
                          "runs_finished_twice", "runs_not_terminal", "attempts_not_terminal",
                          "stuck_claims")),
            ("processes", ("expired_lease_processes",)),
            ("retention", ("retention_pending", "stuck_retention_claims", "tombstones_lost",
                           "tombstoned_objects_present", "delete_markers",
                           "objects_deleted_twice"))):
        faults.update({f"{section}.{k}": report[section][k] for k in keys})
    faults["acked_writes_lost"] = report["acked_writes_lost"]
    assert not any(faults.values()), {k: v for k, v in faults.items() if v}
    # the drill exercised what it reports on
    assert report["processes"]["attempts_sampled"] > 0
    assert any(k.startswith("lost") for k in report["dispatch"]["attempts_by_status"]), \
        "no attempt's lease was cut by the crash"
    assert report["retention"]["tombstones"].get("deleted", 0) > 0
    assert report["acked_writes_after_crash"] > 0
    for name in report["ledger"]:
        assert report["ledger"][name]["outcomes"].get("run_created", 0) > 0
