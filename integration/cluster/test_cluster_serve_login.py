"""``ql3 control serve`` refuses a privileged login (docs/protocols.md §4.1, least privilege): with
the database reachable at start, the superuser's (schema owner's) URL exits 2 naming the
option, as ``retention sweep`` does; with the database down at start the replica starts as
before, and once PostgreSQL is back ``/readyz`` says 503 ``runtime_login_privileged`` — never
ready — while the runtime login of the same cluster becomes ready."""

from __future__ import annotations

import httpx
import pytest
from cluster_kit import Cluster, PrivatePostgres, free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def _serve_args(cluster: Cluster, url: str, port: int) -> list[str]:
    return ["control", "serve", "--database-url", url, "--runtime-role",
            cluster.db.runtime_role, "--listen", f"127.0.0.1:{port}", "--log-bucket",
            cluster.bucket, "--s3-endpoint", cluster.s3_endpoint, "--replica-id", "c-owner"]


def test_serve_with_the_owner_url_exits_2_before_serving(cluster: Cluster) -> None:
    out = cluster.ql3(*_serve_args(cluster, cluster.db.owner_url, free_port()), check=False,
                      timeout=60)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "--database-url: logs in or acts as a superuser" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and cluster.db.owner_url not in out.stderr


def test_serve_started_while_the_database_is_down_is_never_ready_with_the_owner_login(
        private_cluster: Cluster, private_pg: PrivatePostgres) -> None:
    cluster = private_cluster
    private_pg.stop("fast")
    port = free_port()
    proc = cluster._start("c-owner", _serve_args(cluster, cluster.db.owner_url, port),
                          cluster.env())
    proc.url = f"http://127.0.0.1:{port}"

    def probe() -> tuple[int, dict[str, object]] | None:
        try:
            r = httpx.get(f"{proc.url}/readyz", timeout=2)
        except httpx.HTTPError:
            return None
        return r.status_code, r.json()

    assert wait_for(lambda: probe() is not None or not proc.alive(), 30, 0.1), proc.log()
    assert proc.alive(), proc.log()
    assert probe() == (503, {"ready": False, "reasons": ["database_unavailable"],
                             "degraded": []})
    private_pg.start()
    assert wait_for(lambda: (probe() or (0, {}))[1].get("reasons")
                    == ["runtime_login_privileged"], 15, 0.2), (probe(), proc.log()[-3000:])
    for _ in range(5):  # stays not ready: checked on every readiness period
        assert probe() == (503, {"ready": False, "reasons": ["runtime_login_privileged"],
                                 "degraded": []})
    runtime = cluster.start_control("c-runtime")  # same database, the runtime login: ready
    assert runtime.alive()
    assert proc.terminate() == 0, proc.log()[-3000:]


def test_a_replica_says_in_its_log_why_it_is_not_ready_and_when_it_is(
        cluster: Cluster) -> None:
    """A replica that is up but never ready (here: ``--runtime-role`` naming a role the
    grants were not made to) says so in its own log with the reason, once — not only on
    ``/readyz``; a healthy replica logs ``ready``."""
    wrong = cluster.start_control("c-wrong-role", "--runtime-role", "ql3_no_such_role",
                                  wait=False)
    assert wait_for(lambda: "not ready: runtime_role_invalid" in wrong.log()
                    or not wrong.alive(), 30, 0.2), wrong.log()[-3000:]
    assert wrong.alive(), wrong.log()[-3000:]
    wait_for(lambda: False, 5, 0.5)  # a few more readiness periods (2 s each)
    assert wrong.log().count("not ready: runtime_role_invalid") == 1, wrong.log()[-3000:]
    good = cluster.start_control("c-good")
    assert wait_for(lambda: "INFO qinglong.control.serve: ready" in good.log(), 10, 0.2), \
        good.log()[-3000:]
