"""``ql3 cluster logs`` of an attempt whose log could not be stored (reason
``log_unavailable``: the object store was unavailable when it ended; docs/protocols.md §4.9),
through the real ``ql3`` binary against a real ``ql3 control serve``, PostgreSQL and moto.
The worker is scripted (``live_log_kit.ScriptedWorker``): it streams part of the output as
live chunks, then completes ``succeeded`` with no log and that reason, as the worker does
past its upload bound. ``logs`` (and ``logs -f``) print the streamed chunks, then one line
saying the log may be incomplete because the object store was unavailable, and exit 1."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from cluster_kit import QL3, Cluster
from live_log_kit import ScriptedWorker, manual_task

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
STREAMED = "签到开始\n账号一: 成功\n".encode()


@pytest.fixture
def unstored(cluster: Cluster) -> Iterator[tuple[Cluster, str, str, str]]:
    """A finished run whose only attempt completed ``log_unavailable``: (cluster, control
    URL, viewer token, task name)."""
    admin, viewer = cluster.token("admin"), cluster.token("viewer")
    worker_token = cluster.token("worker", pool="default", labels="zone=a")
    url = str(cluster.start_control("c1").url)
    worker = ScriptedWorker(url, worker_token)
    try:
        manual_task(cluster, url, admin, name="daily-sign")
        lease = worker.claim()
        assert worker.send(lease, 0, STREAMED)["results"][0]["status"] == 200
        done = worker.http.post("/v1/worker/complete", json={
            "lease": lease.json(), "outcome": "succeeded", "exit_code": 0, "signal": None,
            "log": None, "reason": "log_unavailable"})
        assert done.status_code == 200, done.text
        yield cluster, url, viewer, "daily-sign"
    finally:
        worker.http.close()


def logs(cluster: Cluster, url: str, token: str, *args: str
         ) -> subprocess.CompletedProcess[str]:
    env = cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=token, COLUMNS="80")
    return subprocess.run([QL3, "cluster", "logs", *args], env=env, capture_output=True,
                          text=True, timeout=90, check=False)


@pytest.mark.parametrize("follow", [(), ("-f",)], ids=["plain", "follow"])
def test_logs_of_an_unstored_log_say_it_may_be_incomplete_and_exit_1(
        unstored: tuple[Cluster, str, str, str], follow: tuple[str, ...]) -> None:
    cluster, url, viewer, task = unstored
    out = logs(cluster, url, viewer, *follow, f"{task}#1")
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stdout == STREAMED.decode()  # the streamed chunks are its partial log
    said = [line for line in out.stderr.splitlines() if "incomplete" in line]
    assert said == ["ql3: error: attempt 1's log may be incomplete: the object store was "
                    "unavailable"], out.stderr
    assert "Traceback" not in out.stderr
    assert len(said[0]) <= 80
