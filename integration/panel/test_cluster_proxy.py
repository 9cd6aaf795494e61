"""`ql3 control serve --trusted-proxy` (docs/panel.md "Cluster"): the real binary, two
replicas over one PostgreSQL and moto's S3 server, one trusting 127.0.0.1 as its reverse
proxy and one trusting nobody; the panel's sign-in throttle counts the forwarded client
only on the first, and the cookie is Secure there only."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


pytest.importorskip("moto")
pytest.importorskip("psycopg")

from cluster_kit import QL3, ClusterDb, cluster_world  # noqa: E402

from pg_ahead import Ahead  # noqa: E402
from pg_reaper import Reaper  # noqa: E402

WRONG = "ql3_" + "z" * 43


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, moto_session: str,
          cluster_dbs: Ahead[ClusterDb], pg_reaper: Reaper) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("panel-proxy")
    with cluster_world(tmp, moto_session, cluster_dbs.take(), reaper=pg_reaper) as cluster:
        db = cluster.db
        admin = cluster.token("operator")
        proxied = cluster.start_control("behind", "--trusted-proxy", "127.0.0.1,10.0.0.0/8")
        direct = cluster.start_control("direct")
        yield {"cluster": cluster, "db": db, "token": admin,
               "behind": str(proxied.url), "direct": str(direct.url)}


def _sign_in(base: str, token: str, **headers: str) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as http:
        return http.post("/ui/signin", data={"token": token},
                         headers={"Origin": base, **headers})


def _clear(world: dict[str, Any]) -> None:
    import psycopg

    with psycopg.connect(world["db"].owner_url, autocommit=True) as conn:
        conn.execute("DELETE FROM panel_signin_failures")


def test_a_replica_behind_a_trusted_proxy_counts_each_forwarded_client(
        world: dict[str, Any]) -> None:
    _clear(world)
    base = world["behind"]
    assert _sign_in(base, WRONG, **{"X-Forwarded-For": "203.0.113.1"}).status_code == 403
    assert _sign_in(base, world["token"],
                    **{"X-Forwarded-For": "203.0.113.1"}).status_code == 429
    other = _sign_in(base, world["token"], **{"X-Forwarded-For": "203.0.113.2"})
    assert other.status_code == 303, other.text
    https = _sign_in(base, world["token"], **{"X-Forwarded-For": "203.0.113.3",
                                              "X-Forwarded-Proto": "https",
                                              "Origin": "https://" + base.split("://")[1]})
    assert https.status_code == 303 and "Secure" in https.headers["set-cookie"]


def test_a_replica_trusting_nobody_ignores_forwarded_headers(world: dict[str, Any]) -> None:
    _clear(world)
    base = world["direct"]
    assert _sign_in(base, WRONG, **{"X-Forwarded-For": "203.0.113.1"}).status_code == 403
    spoofed = _sign_in(base, world["token"], **{"X-Forwarded-For": "203.0.113.2",
                                                "X-Forwarded-Proto": "https"})
    assert spoofed.status_code == 429  # the peer itself waits, whatever it claims


def test_a_bad_trusted_proxy_exits_2_naming_the_option(world: dict[str, Any]) -> None:
    import subprocess

    cluster = world["cluster"]
    out = subprocess.run([QL3, "control", "serve", "--database-url", world["db"].runtime_url,
                          "--log-bucket", cluster.bucket, "--listen", "127.0.0.1:1",
                          "--trusted-proxy", "127.0.0.1,proxy.example"],
                         env=cluster.env(), capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 2, out.stderr
    assert "--trusted-proxy" in out.stderr and "'proxy.example' is not an IP address" \
        in out.stderr
