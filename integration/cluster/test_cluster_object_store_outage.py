"""An object-store outage as a control replica shows it (docs/protocols.md §4.5 ``/readyz``,
docs/operations.md §4), with a real ``ql3 control serve``, PostgreSQL and moto's server over
real HTTP that the test stops and starts.

Within 30 s of moto stopping, ``/readyz`` lists ``object_store: object_store_unavailable``
as degraded and ``ql3_object_store_available`` is 0, while the replica answers ready (200)
at every poll: only database and schema reasons fail readiness. Meanwhile an attempt
completed with reason ``log_unavailable`` (what a worker sends when its log could not be
stored) is recorded: an ``attempt_log_unavailable`` event and
``ql3_attempts_log_unavailable_total``. Once moto is back the degradation clears.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cluster_kit import Cluster, ClusterDb, free_port, pg_url
from s3_services import CREDS, new_bucket, stop_process, wait_port

from pg_ahead import Ahead
from pg_reaper import Reaper
from qinglong.control.retention.objects import make_client

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
UNAVAILABLE = "object_store: object_store_unavailable"


class Moto:
    """``python -m moto.server`` on a fixed port of its own, stopped and started again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = dict(os.environ, PYTHONWARNINGS="ignore",
                   **{k.upper(): v for k, v in CREDS.items()})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        wait_port(self.port, self.proc, 20)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


@pytest.fixture
def outage_cluster(tmp_path: Path, cluster_dbs: Ahead[ClusterDb],
                   pg_reaper: Reaper) -> Iterator[tuple[Cluster, Moto]]:
    moto = Moto()  # its own server: the test stops it
    moto.start()
    db = cluster_dbs.take()
    cluster = Cluster(tmp_path, db, moto.endpoint, "")
    try:
        client = make_client(moto.endpoint, timeout_s=5, **CREDS)
        cluster.bucket = new_bucket(client, versioned=True)
        client.close()
        yield cluster, moto
    finally:
        cluster.close()
        moto.stop()
        pg_reaper.drop(pg_url("postgres", "postgres"), db.name, db.login_role,
                       db.runtime_role)


def readyz(url: str) -> tuple[int, dict[str, Any]]:
    answer = httpx.get(f"{url}/readyz", timeout=5)
    return answer.status_code, answer.json()


def metric(url: str, name: str) -> float | None:
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def watch_readyz(url: str, until: Any, timeout: float) -> float:
    """Poll /readyz until ``until(body)``; every answer must be 200 ready. Seconds taken;
    AssertionError past ``timeout``."""
    start = time.monotonic()
    while True:
        status, body = readyz(url)
        assert (status, body["ready"]) == (200, True), body
        if until(body):
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, body
        time.sleep(0.5)


def test_an_outage_is_degraded_within_30_s_and_the_replica_stays_ready(
        outage_cluster: tuple[Cluster, Moto]) -> None:
    cluster, moto = outage_cluster
    control = cluster.start_control("c1")
    url = control.url or ""
    watch_readyz(url, lambda b: UNAVAILABLE not in b["degraded"], 30)
    assert metric(url, "ql3_object_store_available") == 1.0

    moto.stop()
    took = watch_readyz(url, lambda b: UNAVAILABLE in b["degraded"], 30)
    assert took < 30
    assert metric(url, "ql3_object_store_available") == 0.0
    assert "object store unavailable" in control.log()

    # a worker's attempt that could not store its log completes with log_unavailable
    admin, worker = cluster.token("admin"), cluster.token("worker", pool="pool-a")
    with cluster.api(url, admin) as api, cluster.api(url, worker) as wapi:
        kinds = _complete_without_log(cluster, api, wapi)
    assert "attempt_log_unavailable" in kinds
    assert metric(url, "ql3_attempts_log_unavailable_total") == 1.0  # a replay counts once

    moto.start()  # a fresh moto: the bucket is made again, as an operator's restore would
    client = make_client(moto.endpoint, timeout_s=5, **CREDS)
    client.create_bucket(Bucket=cluster.bucket)
    client.put_bucket_versioning(Bucket=cluster.bucket,
                                 VersioningConfiguration={"Status": "Enabled"})
    client.close()
    watch_readyz(url, lambda b: UNAVAILABLE not in b["degraded"], 60)
    assert metric(url, "ql3_object_store_available") == 1.0


def _complete_without_log(cluster: Cluster, api: httpx.Client, wapi: httpx.Client
                          ) -> list[str]:
    """Run a task, claim and start it as a worker over HTTP, complete it with reason
    ``log_unavailable`` and no log (twice: the second is a replay); the kinds of its run's
    events. The run finishes with the exit code's outcome."""
    assert api.post("/v1/tasks", json={"name": "daily-sign", "argv": ["true"]}
                    ).status_code == 201
    run = api.post("/v1/tasks/daily-sign/run").json()
    inc = wapi.post("/v1/worker/register", json={
        "name": "w1", "labels": {}, "concurrency": 1}).json()["incarnation_id"]
    (attempt,) = wapi.post("/v1/worker/claim", json={
        "incarnation_id": inc, "max_attempts": 1}).json()["attempts"]
    lease = attempt["lease"]
    assert wapi.post("/v1/worker/started", json={"lease": lease, "pid": 4242}
                     ).status_code == 200
    report = {"lease": lease, "outcome": "succeeded", "exit_code": 0, "signal": None,
              "log": None, "reason": "log_unavailable"}
    done = wapi.post("/v1/worker/complete", json=report)
    assert done.status_code == 200, done.text
    assert wapi.post("/v1/worker/complete", json=report).json()["replayed"] is True
    with cluster.db.connect() as conn:
        kinds = [r[0] for r in conn.execute(
            "SELECT kind FROM events WHERE run_id = %s ORDER BY id", (run["id"],))]
    assert api.get(f"/v1/runs/{run['id']}").json()["status"] == "succeeded"
    return kinds

