"""Run and attempt routes over real PostgreSQL as the runtime role (docs/architecture.md §2;
docs/protocols.md §4.5;
issue 11 item 7): filters, keyset pages without gaps or repeats, detail with attempts and
events, cancel semantics by status, lease tokens never answered."""

from __future__ import annotations

from typing import Any

import pytest
from api_world import ApiWorld

from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def make_task(api: ApiWorld, name: str = "backup") -> str:
    answer = api.client.post("/v1/tasks", json={"name": name, "shell": "echo hi"},
                             headers=api.as_("admin"))
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def make_run(api: ApiWorld, task_id: str, status: str, *, ago_s: int = 0) -> str:
    run_id = uuid7()
    finished = "now()" if status not in ("queued", "dispatching", "running") else "NULL"
    api.sql(f"INSERT INTO runs (id, project_id, task_id, owner, status, created_at, finished_at)"
            f" VALUES (%(r)s, %(p)s, %(t)s, 'runtime', %(s)s,"
            f" now() - make_interval(secs => %(a)s), {finished})",
            {"r": run_id, "p": api.ctx.project_id, "t": task_id, "s": status, "a": ago_s})
    return run_id


def pages(api: ApiWorld, **params: Any) -> list[str]:
    seen: list[str] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        answer = api.client.get("/v1/runs", params=query, headers=api.as_("viewer"))
        assert answer.status_code == 200, answer.text
        page = answer.json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return seen


def test_runs_filter_by_task_status_and_time_and_page_by_keyset(api: ApiWorld) -> None:
    a, b = make_task(api, "a"), make_task(api, "b")
    old = [make_run(api, a, "succeeded", ago_s=3600) for _ in range(3)]
    new = [make_run(api, a, "failed") for _ in range(4)]
    other = make_run(api, b, "queued")
    everything = pages(api, limit=2)
    assert everything == sorted([*old, *new, other], reverse=True)
    assert pages(api, task="a", limit=3) == sorted([*old, *new], reverse=True)
    assert pages(api, status="failed", limit=3) == sorted(new, reverse=True)
    cut = api.sql("SELECT now() - interval '10 minutes'")[0][0].isoformat()
    assert pages(api, created_before=cut) == sorted(old, reverse=True)
    assert pages(api, created_after=cut, task="a") == sorted(new, reverse=True)
    bad = api.client.get("/v1/runs", params={"limit": 201}, headers=api.as_("viewer"))
    assert bad.status_code == 422


def test_run_detail_has_attempts_and_events_but_never_the_lease_token(api: ApiWorld) -> None:
    run_id = make_run(api, make_task(api), "running")
    attempt_id, lease = uuid7(), "0190a000-0000-7000-8000-00000000beef"
    api.sql("INSERT INTO attempts (id, run_id, number, executor, status, lease_token)"
            " VALUES (%(a)s, %(r)s, 1, 'remote_worker', 'running', %(l)s)",
            {"a": attempt_id, "r": run_id, "l": lease})
    api.sql("INSERT INTO events (id, run_id, attempt_id, kind, from_status, to_status)"
            " VALUES (%(e)s, %(r)s, %(a)s, 'started', 'dispatching', 'running')",
            {"e": uuid7(), "r": run_id, "a": attempt_id})
    detail = api.client.get(f"/v1/runs/{run_id}", headers=api.as_("viewer"))
    assert detail.status_code == 200
    body = detail.json()
    assert [a["id"] for a in body["attempts"]] == [attempt_id]
    assert [(e["kind"], e["to_status"]) for e in body["events"]] == [("started", "running")]
    one = api.client.get(f"/v1/attempts/{attempt_id}", headers=api.as_("viewer"))
    assert one.json()["status"] == "running" and one.json()["has_log"] is False
    assert lease not in detail.text and lease not in one.text
    assert api.client.get(f"/v1/runs/{uuid7()}", headers=api.as_("viewer")).status_code == 404


def test_cancel_a_queued_run_finishes_it_at_once_with_its_event(api: ApiWorld) -> None:
    run_id = make_run(api, make_task(api), "queued")
    answer = api.client.post(f"/v1/runs/{run_id}/cancel", headers=api.as_("operator"))
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "cancelled" and answer.json()["finished_at"]
    events = api.sql("SELECT kind, from_status, to_status FROM events WHERE run_id = %(r)s",
                     {"r": run_id})
    assert events == [("cancelled", "queued", "cancelled")]
    again = api.client.post(f"/v1/runs/{run_id}/cancel", headers=api.as_("operator"))
    assert (again.status_code, again.json()["error"]["code"]) == (409, "already_finished")


@pytest.mark.parametrize("status", ["dispatching", "running"])
def test_cancel_a_started_run_requests_it_for_the_worker(api: ApiWorld, status: str) -> None:
    run_id = make_run(api, make_task(api), status)
    answer = api.client.post(f"/v1/runs/{run_id}/cancel", headers=api.as_("operator"))
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] == status and answer.json()["cancel_requested_at"]
    (requested,) = api.sql("SELECT cancel_requested_at FROM runs WHERE id = %(r)s",
                           {"r": run_id})[0]
    assert requested is not None
    # asked twice: still 202, the first request time and one event
    assert api.client.post(f"/v1/runs/{run_id}/cancel",
                           headers=api.as_("operator")).status_code == 202
    assert api.sql("SELECT cancel_requested_at FROM runs WHERE id = %(r)s",
                   {"r": run_id}) == [(requested,)]
    assert api.sql("SELECT count(*) FROM events WHERE run_id = %(r)s", {"r": run_id}) == [(1,)]


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled", "timed_out", "lost"])
def test_cancel_a_finished_run_is_409(api: ApiWorld, status: str) -> None:
    run_id = make_run(api, make_task(api), status)
    answer = api.client.post(f"/v1/runs/{run_id}/cancel", headers=api.as_("operator"))
    assert (answer.status_code, answer.json()["error"]["code"]) == (409, "already_finished")
    assert api.sql("SELECT status FROM runs WHERE id = %(r)s", {"r": run_id}) == [(status,)]


def test_runs_of_a_deleted_task_stay_readable(api: ApiWorld) -> None:
    run_id = make_run(api, make_task(api), "succeeded")
    api.client.delete("/v1/tasks/backup", headers=api.as_("admin"))
    assert pages(api, task="backup") == [run_id]
    assert api.client.get(f"/v1/runs/{run_id}", headers=api.as_("viewer")).status_code == 200
