"""Losing the database (issue 11 item 8; docs/protocols.md §4.5): a real ``ql3 control serve`` on a
PostgreSQL server of the test's own, which is crashed (``pg_ctl stop -m immediate``: clients
cut off, no shutdown checkpoint) and started again. Control never exits and never crash-loops:
``/livez`` stays 200, ``/readyz`` says 503 ``database_unavailable`` within a few seconds, API
calls answer 503 ``database_unavailable`` (retry later, not 500), the log has a few warning
lines per lifecycle and no traceback; once PostgreSQL is back, the replica is ready again
within 10 s (every lifecycle's retry backoff is capped at 5 s) and schedules new work.
"""

from __future__ import annotations

import re
import time
from collections import Counter

import httpx
import pytest
from cluster_kit import Cluster, PrivatePostgres, Proc, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

OUTAGE_S = 12.0  # long enough for every lifecycle's backoff to reach its 5 s cap
READY_AGAIN_S = 10.0  # the cap (5 s) + the readiness period (2 s) + slack
WARNINGS_PER_SOURCE = 3


def _probe(control: Proc, path: str) -> tuple[int, dict[str, object]]:
    r = httpx.get(f"{control.url}{path}", timeout=5)
    return r.status_code, r.json()


def _warning_sources(log: str) -> Counter[str]:
    """WARNING/ERROR lines by source: the logger and, for the lifecycles, the lifecycle's
    name (``... WARNING qinglong.control.serve: scheduler: tick failed ...``)."""
    sources: Counter[str] = Counter()
    for line in log.splitlines():
        m = re.match(r"\S+ \S+ (WARNING|ERROR|CRITICAL) (\S+): (\w+):?", line)
        if m:
            sources[f"{m[1]} {m[2]} {m[3]}"] += 1
    return sources


def test_control_rides_out_a_database_crash_and_schedules_again_after_it(
        private_cluster: Cluster, private_pg: PrivatePostgres) -> None:
    cluster = private_cluster
    admin = cluster.token("admin")
    control = cluster.start_control("c1")
    api = cluster.api(control.url or "", admin)
    assert api.get("/v1/tasks").status_code == 200  # the pool holds live connections

    private_pg.stop("immediate")
    down_at = time.monotonic()
    not_ready = wait_for(lambda: _probe(control, "/readyz")[0] == 503, 5)
    assert not_ready, _probe(control, "/readyz")
    assert _probe(control, "/readyz") == (
        503, {"ready": False, "reasons": ["database_unavailable"], "degraded": []})
    refused = api.get("/v1/tasks")
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "database_unavailable"
    while time.monotonic() - down_at < OUTAGE_S:  # a client polling through the outage
        assert control.alive(), control.log()[-3000:]
        assert _probe(control, "/livez")[0] == 200
        assert api.get("/v1/runs").status_code == 503
        time.sleep(0.5)
    assert _probe(control, "/readyz")[0] == 503

    private_pg.start()
    assert wait_for(lambda: _probe(control, "/readyz")[0] == 200, READY_AGAIN_S), (
        _probe(control, "/readyz"), control.log()[-3000:])
    created = api.post("/v1/tasks", json={"name": "after-outage", "argv": ["true"],
                                          "schedule": "* * * * * *"})
    assert created.status_code == 201, created.text

    def runs() -> list[dict[str, object]]:
        items: list[dict[str, object]] = api.get(
            "/v1/runs", params={"task": "after-outage"}).json()["items"]
        return items

    assert wait_for(runs, 10, 0.25), control.log()[-3000:]
    api.close()
    assert control.terminate() == 0, control.log()[-3000:]

    log = control.log()
    assert "Traceback" not in log, log[-5000:]
    noisy = {src: n for src, n in _warning_sources(log).items() if n > WARNINGS_PER_SOURCE}
    assert not noisy, (noisy, log[-5000:])
    assert not [src for src in _warning_sources(log) if src.startswith("ERROR")], log[-5000:]
    assert "recovered after" in log  # the lifecycles say so once the database is back
