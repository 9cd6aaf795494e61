"""``/livez``, ``/readyz`` with named reasons, ``/metrics`` by route template
(DESIGN.md §4.1, §4.5; issue 11 item 7)."""

from __future__ import annotations

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
