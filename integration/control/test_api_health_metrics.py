"""``/livez``, ``/readyz`` with named reasons, ``/metrics`` by route template
(docs/protocols.md §4.1, §4.5; issue 11 item 7)."""

from __future__ import annotations

import httpx
import pytest
from api_world import ApiWorld

from qinglong.control.api.health import schema_readiness_check
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_readyz_names_reasons_and_lists_degraded_capabilities(api: ApiWorld) -> None:
    assert api.client.get("/livez").json() == {"status": "ok"}
    api.ctx.readiness = schema_readiness_check(api.engine, api.pg_db.runtime_role)
    ready = api.client.get("/readyz")
    assert (ready.status_code, ready.json()["ready"]) == (200, True), ready.text
    api.ctx.readiness = lambda: (True, [], ["object_store: object_store_unsafe"])
    assert api.client.get("/readyz").json()["degraded"] == ["object_store: object_store_unsafe"]
    api.ctx.readiness = lambda: (False, ["migration_pending"], [])
    not_ready = api.client.get("/readyz")
    assert (not_ready.status_code, not_ready.json()["reasons"]) == (503, ["migration_pending"])

    def broken() -> tuple[bool, list[str], list[str]]:
        raise ConnectionError("db down at postgresql://secret@host")

    api.ctx.readiness = broken
    down = api.client.get("/readyz")
    assert (down.status_code, down.json()["reasons"]) == (503, ["database_unavailable"])
    assert "secret" not in down.text


def test_metrics_label_requests_by_route_template_and_expose_counters(api: ApiWorld) -> None:
    run_id = uuid7()
    api.client.get(f"/v1/runs/{run_id}", headers=api.as_("viewer"))
    assert api.ctx.metrics is not None
    api.ctx.metrics.claimed(3)
    api.ctx.metrics.lease_lost("not_started")
    api.ctx.metrics.occurrence("skipped_active", 2)
    api.ctx.metrics.retention("deleted")
    text = api.client.get("/metrics").text
    assert 'route="/v1/runs/{run_id}"' in text and run_id not in text
    assert "ql3_claims_total 3.0" in text
    assert 'ql3_leases_lost_total{reason="not_started"} 1.0' in text
    assert 'ql3_occurrences_total{outcome="skipped_active"} 2.0' in text
    assert 'ql3_retention_outcomes_total{class="deleted"} 1.0' in text


def _text(api: ApiWorld) -> str:
    return api.client.get("/metrics").text


def test_claims_fenced_writes_and_recovered_leases_are_counted_by_reason(api: ApiWorld) -> None:
    """Claims through the real route count in ``ql3_claims_total``; a write answered 409
    ``lease_lost`` counts as ``fenced``; the replica's recovery tick counts each lost attempt
    under the reason recovery recorded (``not_started`` / ``lost``), never one total."""
    from qinglong.control.dispatch.recovery import LeaseRecovery
    from qinglong.control.serve.replica import recovery_tick

    task_id = uuid7()
    api.sql("INSERT INTO tasks (id, project_id, name, log_retention_s, shell, labels) VALUES"
            " (%(t)s, %(p)s, 'counted', 0, 'true', '{\"zone\": \"a\"}')",
            {"t": task_id, "p": api.ctx.project_id})
    for _ in range(3):
        api.sql("INSERT INTO runs (id, project_id, task_id, owner, status, trigger) VALUES"
                " (%(r)s, %(p)s, %(t)s, 'runtime', 'queued', 'manual')",
                {"r": uuid7(), "p": api.ctx.project_id, "t": task_id})
    worker = api.as_("worker")

    def post(path: str, body: dict[str, object]) -> httpx.Response:
        return api.client.post(f"/v1/worker/{path}", json=body, headers=worker)

    inc = post("register", {"name": "w1", "labels": {"zone": "a"}, "concurrency": 4}
               ).json()["incarnation_id"]
    first = post("claim", {"incarnation_id": inc, "max_attempts": 2}).json()["attempts"]
    second = post("claim", {"incarnation_id": inc, "max_attempts": 4}).json()["attempts"]
    assert (len(first), len(second)) == (2, 1)
    assert post("claim", {"incarnation_id": inc, "max_attempts": 4}).json()["attempts"] == []
    assert "ql3_claims_total 3.0" in _text(api)

    started, fenced, _ = (a["lease"] for a in first + second)
    assert post("started", {"lease": started, "pid": 7}).status_code == 200
    stale = {**fenced, "lease_version": fenced["lease_version"] + 1}
    refused = post("heartbeat", {"lease": stale})
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "lease_lost")
    unknown = post("claim", {"incarnation_id": uuid7(), "max_attempts": 1})
    assert unknown.json()["error"]["code"] == "unknown_incarnation"  # not a lease: not counted
    text = _text(api)
    assert 'ql3_leases_lost_total{reason="fenced"} 1.0' in text
    assert 'reason="not_started"' not in text and 'reason="lost"' not in text

    api.sql("UPDATE attempts SET lease_expires_at = now() - interval '1 ms'"
            " WHERE run_id IN (SELECT id FROM runs WHERE task_id = %(t)s)", {"t": task_id})
    assert api.ctx.metrics is not None
    result = recovery_tick(LeaseRecovery(api.engine), api.ctx.metrics)
    assert (result.lost, dict(result.reasons)) == (3, {"not_started": 2, "lost": 1})
    text = _text(api)
    assert 'ql3_leases_lost_total{reason="not_started"} 2.0' in text
    assert 'ql3_leases_lost_total{reason="lost"} 1.0' in text
    assert 'ql3_leases_lost_total{reason="fenced"} 1.0' in text
    assert 'reason="expired"' not in text
