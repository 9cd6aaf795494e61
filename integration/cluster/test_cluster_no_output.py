"""An attempt that writes no output completes without a log object (docs/protocols.md §4.2
"Completion and the worker's log"): real ``ql3 control serve`` and ``ql3 worker run``
processes, PostgreSQL and moto over HTTP.

- A worker and a replica of this release: ``true`` asks no upload grant, puts nothing, and
  completes through ``/v1/worker/complete-no-output``; exactly once (one
  ``attempt_running``, one ``attempt_completed`` saying ``no_output``, one ``run_finished``),
  no artifact, nothing in the bucket, nothing enrolled for retention, nothing for the orphan
  sweep to HEAD; ``ql3 cluster logs`` (plain and ``-f``) prints nothing and exits 0. A task
  that prints still uploads and completes with its artifact as before.
- Rolling upgrade, both directions (``prev_release.py``): a worker of this release against a
  replica without the route (404: it falls back to grant, PUT and ``/complete``), and a
  worker of the release before (no such route used) against a replica of this one: each
  run succeeds exactly once with an (empty) stored log that ``logs`` prints as nothing.
- The route itself over HTTP (a scripted worker): the refusals and replay of
  ``complete-no-output``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from cluster_kit import QL3, Cluster, wait_for
from live_log_kit import Lease, ScriptedWorker, manual_task
from prev_release import command as prev_release
from s3_services import CREDS

from qinglong.control.db.engine import create_engine
from qinglong.control.history.orphans import sweep_orphans
from qinglong.control.retention.objects import S3ObjectStore, make_client

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
TERMINAL = {"succeeded", "failed", "lost", "cancelled", "timed_out"}


def _run(cluster: Cluster, url: str, admin: str, name: str, argv: list[str]) -> str:
    """Create task ``name`` running ``argv``, run it now, wait for the run to end; its id."""
    with cluster.api(url, admin) as api:
        r = api.post("/v1/tasks", json={"name": name, "argv": argv})
        assert r.status_code == 201, r.text
        r = api.post(f"/v1/tasks/{name}/run")
        assert r.status_code == 201, r.text
        run_id: str = r.json()["id"]

    def ended() -> bool:
        with cluster.db.connect() as conn:
            row = conn.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
        return row is not None and row[0] in TERMINAL

    assert wait_for(ended, 60), "the run did not end"
    return run_id


def _facts(cluster: Cluster, run_id: str) -> dict[str, Any]:
    """The run's status, its attempts' (status, no_output flag), event counts by kind,
    artifacts and retention controls."""
    with cluster.db.connect() as conn:
        status = conn.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
        tries = conn.execute(
            "SELECT id::text, status, coalesce((completion ->> 'no_output')::boolean, false)"
            " FROM attempts WHERE run_id = %s", (run_id,)).fetchall()
        events = dict(conn.execute(
            "SELECT kind, count(*) FROM events WHERE run_id = %s AND kind IN"
            " ('attempt_running', 'attempt_completed', 'run_finished') GROUP BY kind",
            (run_id,)).fetchall())
        detail = conn.execute(
            "SELECT detail FROM events WHERE run_id = %s AND kind = 'attempt_completed'",
            (run_id,)).fetchone()
        artifacts = conn.execute(
            "SELECT size_bytes FROM run_attempt_log_artifacts WHERE run_id = %s",
            (run_id,)).fetchall()
        controls = conn.execute(
            "SELECT count(*) FROM run_attempt_log_retention_controls WHERE run_id = %s",
            (run_id,)).fetchone()
        project = conn.execute("SELECT project_id::text FROM runs WHERE id = %s",
                               (run_id,)).fetchone()
    assert status is not None and controls is not None and project is not None
    return {"status": status[0], "attempts": [(t[1], t[2]) for t in tries],
            "attempt_ids": [t[0] for t in tries], "events": events,
            "detail": None if detail is None else detail[0],
            "artifacts": [a[0] for a in artifacts], "controls": controls[0],
            "project": project[0]}


ONCE = {"attempt_running": 1, "attempt_completed": 1, "run_finished": 1}


def _objects(cluster: Cluster, project: str, attempt_id: str) -> list[Any]:
    s3 = make_client(cluster.s3_endpoint, timeout_s=5, **CREDS)
    listed = s3.list_object_versions(Bucket=cluster.bucket,
                                     Prefix=f"p/{project}/wlog-{attempt_id}")
    return list(listed.get("Versions", []))


def _requests(url: str, route: str) -> float:
    """Requests to ``route`` this replica answered (its ``/metrics`` histogram count)."""
    total = 0.0
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if (line.startswith("ql3_http_request_duration_seconds_count{")
                and f'route="{route}"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _logs(cluster: Cluster, url: str, token: str, *args: str
          ) -> subprocess.CompletedProcess[str]:
    env = cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=token, COLUMNS="80")
    return subprocess.run([QL3, "cluster", "logs", *args], env=env, capture_output=True,
                          text=True, timeout=90, check=False)


def test_an_attempt_without_output_puts_no_object_and_its_logs_print_nothing(
        cluster: Cluster) -> None:
    admin, viewer = cluster.token("admin"), cluster.token("viewer")
    control = cluster.start_control("c1")
    url = control.url or ""
    worker = cluster.start_worker("w1", cluster.token("worker", pool="p1"), url)
    run_id = _run(cluster, url, admin, "quiet", ["true"])
    facts = _facts(cluster, run_id)
    assert facts["status"] == "succeeded", worker.log()[-3000:]
    assert facts["attempts"] == [("succeeded", True)]
    assert facts["events"] == ONCE
    assert facts["detail"] == {"no_output": True}
    assert facts["artifacts"] == [] and facts["controls"] == 0
    assert _objects(cluster, facts["project"], facts["attempt_ids"][0]) == []
    assert _requests(url, "/v1/worker/log-upload") == 0
    assert _requests(url, "/v1/worker/complete") == 0
    assert _requests(url, "/v1/worker/complete-no-output") == 1

    for follow in ((), ("-f",)):
        out = _logs(cluster, url, viewer, *follow, "quiet#1")
        assert out.returncode == 0, (follow, out.stdout, out.stderr)
        assert out.stdout == "", follow
        assert "no log" not in out.stderr and "incomplete" not in out.stderr, out.stderr
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {viewer}"},
                      timeout=10) as api:
        whole = api.get(f"/v1/attempts/{facts['attempt_ids'][0]}/log")
    assert (whole.status_code, whole.content) == (200, b"")
    assert whole.headers.get("QL3-Log-Partial") == "0"
    assert whole.headers.get("QL3-Log-State") == "complete"

    # a task that prints still stores its log, through grant, PUT and /complete
    said = _run(cluster, url, admin, "chatty", ["echo", "签到完成"])
    chatty = _facts(cluster, said)
    assert chatty["attempts"] == [("succeeded", False)] and chatty["events"] == ONCE
    assert chatty["artifacts"] == [len("签到完成\n".encode())]
    assert _requests(url, "/v1/worker/log-upload") == 1
    out = _logs(cluster, url, viewer, "chatty#1")
    assert (out.returncode, out.stdout) == (0, "签到完成\n"), out.stderr

    # the orphan sweep HEADs nothing for it and records no evidence
    s3 = make_client(cluster.s3_endpoint, timeout_s=5, **CREDS)
    engine = create_engine(cluster.db.runtime_url, pool_size=1, max_overflow=0)
    try:
        swept = sweep_orphans(engine, S3ObjectStore(s3, in_transaction=lambda: False), s3,
                              cluster.bucket, "test/1", margin_s=0.0)
    finally:
        engine.dispose()
    assert swept.walked == 2 and not swept.outcomes, swept
    with cluster.db.connect() as conn:
        assert conn.execute("SELECT count(*) FROM orphan_log_objects").fetchone() == (0,)
    assert worker.terminate() == 0, worker.log()[-3000:]


@pytest.mark.parametrize(("control_cmd", "worker_cmd"), [
    (prev_release("control"), (QL3,)),
    ((QL3,), prev_release("worker")),
], ids=["new-worker-old-replica", "old-worker-new-replica"])
def test_across_releases_an_attempt_without_output_stores_an_empty_log_once(
        cluster: Cluster, control_cmd: Sequence[str], worker_cmd: Sequence[str]) -> None:
    admin, viewer = cluster.token("admin"), cluster.token("viewer")
    control = cluster.start_control("c1", command=control_cmd)
    url = control.url or ""
    worker = cluster.start_worker("w1", cluster.token("worker", pool="p1"), url,
                                  command=worker_cmd)
    for n in (1, 2):  # the second after a fallback remembered (or never tried)
        run_id = _run(cluster, url, admin, f"quiet{n}", ["true"])
        facts = _facts(cluster, run_id)
        assert facts["status"] == "succeeded", worker.log()[-3000:]
        assert facts["attempts"] == [("succeeded", False)]
        assert facts["events"] == ONCE
        assert facts["artifacts"] == [0] and facts["controls"] == 1
        assert len(_objects(cluster, facts["project"], facts["attempt_ids"][0])) == 1
        out = _logs(cluster, url, viewer, f"quiet{n}#1")
        assert (out.returncode, out.stdout) == (0, ""), out.stderr
    assert _requests(url, "/v1/worker/complete") == 2
    assert _requests(url, "/v1/worker/log-upload") == 2
    assert worker.terminate() == 0, worker.log()[-3000:]


def test_complete_no_output_refuses_a_log_or_streamed_output_and_replays_once(
        cluster: Cluster) -> None:
    """Over HTTP with a scripted worker: ``complete-no-output`` refuses a report naming a
    log (422) and an attempt whose output was streamed live (409 ``log_mismatch``, nothing
    recorded); a replay answers ``replayed`` with one ``attempt_completed``, and the same
    report on ``/complete`` is another completion (409)."""
    admin = cluster.token("admin")
    url = str(cluster.start_control("c1", lease_ms=30000, heartbeat_ms=10000).url)
    worker = ScriptedWorker(url, cluster.token("worker", pool="default", labels="zone=a"))
    try:
        for _ in range(2):
            manual_task(cluster, url, admin)
        r = worker.http.post("/v1/worker/claim", json={
            "incarnation_id": worker.incarnation, "max_attempts": 2})
        assert r.status_code == 200, r.text
        leases = [a["lease"] for a in r.json()["attempts"]]
        assert len(leases) == 2
        for lease in leases:
            started = worker.http.post("/v1/worker/started", json={"lease": lease, "pid": 1})
            assert started.status_code == 200, started.text

        report = {"lease": leases[0], "outcome": "succeeded", "exit_code": 0,
                  "signal": None, "log": None}
        named = worker.http.post("/v1/worker/complete-no-output", json={
            **report, "log": {"sha256": "0" * 64, "size_bytes": 1}})
        assert (named.status_code, named.json()["error"]["code"]) == (422, "invalid_request")
        live = Lease(**leases[0])
        assert worker.send(live, 0, b"one line\n")["results"][0]["status"] == 200
        streamed = worker.http.post("/v1/worker/complete-no-output", json=report)
        assert (streamed.status_code, streamed.json()["error"]["code"]) == (
            409, "log_mismatch"), streamed.text

        quiet = {**report, "lease": leases[1]}
        done = worker.http.post("/v1/worker/complete-no-output", json=quiet)
        replay = worker.http.post("/v1/worker/complete-no-output", json=quiet)
        assert (done.status_code, done.json()) == (200, {"ok": True, "replayed": False})
        assert (replay.status_code, replay.json()) == (200, {"ok": True, "replayed": True})
        as_v1 = worker.http.post("/v1/worker/complete", json=quiet)  # not the same completion
        assert as_v1.status_code == 409, as_v1.text
        with cluster.db.connect() as conn:
            ended = conn.execute(
                "SELECT a.status, coalesce((a.completion ->> 'no_output')::boolean, false),"
                " (SELECT count(*) FROM events e WHERE e.attempt_id = a.id"
                "  AND e.kind = 'attempt_completed')"
                " FROM attempts a WHERE a.id = ANY(%s::uuid[]) ORDER BY a.id",
                ([lease["attempt_id"] for lease in leases],)).fetchall()
        by_id = dict(zip(sorted(lease["attempt_id"] for lease in leases), ended, strict=True))
        assert by_id[leases[0]["attempt_id"]] == ("running", False, 0)
        assert by_id[leases[1]["attempt_id"]] == ("succeeded", True, 1)
    finally:
        worker.http.close()
