"""``GET /v1/runs/resolve`` and ``GET /v1/workers`` over real PostgreSQL as the runtime role
(docs/protocols.md §4.5; issue 13 item 2): every run-reference form of ``ql3 local``, a task
removed and added again, ambiguity and bad input without echoing it; worker incarnations
with their pool, state by the database clock, attempts held now, and keyset pages."""

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


def make_run(api: ApiWorld, task_id: str, number: int | None, run_id: str | None = None,
             status: str = "succeeded") -> str:
    run_id = run_id or uuid7()
    api.sql("INSERT INTO runs (id, project_id, task_id, owner, status, number)"
            " VALUES (%(r)s, %(p)s, %(t)s, 'runtime', %(s)s, %(n)s)",
            {"r": run_id, "p": api.ctx.project_id, "t": task_id, "s": status, "n": number})
    return run_id


def resolve(api: ApiWorld, ref: str) -> tuple[int, Any]:
    answer = api.client.get("/v1/runs/resolve", params={"ref": ref},
                            headers=api.as_("viewer"))
    body = answer.json()
    return answer.status_code, body["id"] if answer.status_code == 200 else body["error"]


def test_every_reference_form_names_its_run(api: ApiWorld) -> None:
    task = make_task(api)
    first, second = make_run(api, task, 1), make_run(api, task, 2)
    assert resolve(api, "backup#1") == (200, first)
    assert resolve(api, "backup#2") == (200, second)
    assert resolve(api, "backup@last") == (200, second)
    assert resolve(api, second) == (200, second)
    assert resolve(api, second.upper()) == (200, second)
    assert resolve(api, second[-8:]) == (200, second)
    assert resolve(api, second[-17:]) == (200, second)  # a suffix with its dash
    answer = api.client.get("/v1/runs/resolve", params={"ref": "backup#2"},
                            headers=api.as_("viewer")).json()
    assert (answer["task_name"], answer["number"]) == ("backup", 2)


def test_unknown_refs_are_404_and_bad_ones_422_without_echoing_them(api: ApiWorld) -> None:
    task = make_task(api)
    make_run(api, task, 1)
    for ref in ("backup#9", "nosuch#1", "nosuch@last", uuid7(), "abcdef9876"):
        status, error = resolve(api, ref)
        assert (status, error["code"]) == (404, "run_not_found"), ref
        assert ref not in error["message"]
    status, error = resolve(api, "zz-top!")
    assert (status, error["code"]) == (422, "invalid_run_ref")
    assert "zz-top" not in error["message"] and "TASK#N" in error["message"]
    status, error = resolve(api, "abc12")
    assert (status, error["code"]) == (422, "invalid_run_ref")
    assert "6 hex digits" in error["message"]


def test_a_suffix_shared_by_two_runs_is_ambiguous(api: ApiWorld) -> None:
    task = make_task(api)
    tail = "5ca1ab1e5ca1"
    one, two = uuid7()[:-12] + tail, uuid7()[:-12] + tail
    make_run(api, task, 1, one)
    make_run(api, task, 2, two)
    status, error = resolve(api, tail)
    assert (status, error["code"]) == (422, "ambiguous_run")
    assert resolve(api, one[-17:]) == (200, one)


def test_after_remove_and_add_again_numbers_name_the_live_tasks_runs(api: ApiWorld) -> None:
    old = make_task(api)
    old_first, old_second = make_run(api, old, 1), make_run(api, old, 2)
    assert api.client.delete("/v1/tasks/backup", headers=api.as_("admin")).status_code == 204
    assert resolve(api, "backup#1") == (200, old_first)  # no live task: the removed one
    new = make_task(api)
    assert resolve(api, "backup@last") == (200, old_second)  # the new task has no runs yet
    assert resolve(api, "backup#2")[0] == 404  # the live task has no run 2
    new_first = make_run(api, new, 1)
    assert resolve(api, "backup#1") == (200, new_first)
    assert resolve(api, "backup@last") == (200, new_first)
    assert resolve(api, old_first[-10:]) == (200, old_first)  # older runs: by id


def make_incarnation(api: ApiWorld, name: str, *, seen_ago_s: int = 0,
                     stopped: bool = False) -> str:
    incarnation = uuid7()
    api.sql("INSERT INTO worker_incarnations (id, pool_id, name, labels, concurrency,"
            " last_seen_at, stopped_at) SELECT %(i)s, id, %(n)s, '{\"zone\": \"a\"}', 2,"
            " now() - make_interval(secs => %(s)s), CASE WHEN %(x)s THEN now() END"
            " FROM worker_pools WHERE name = 'pool-a'",
            {"i": incarnation, "n": name, "s": seen_ago_s, "x": stopped})
    return incarnation


def hold(api: ApiWorld, incarnation: str, status: str) -> None:
    run_id = make_run(api, make_task(api, f"t-{uuid7()[-6:]}"), 1, status="running")
    api.sql("INSERT INTO attempts (id, run_id, number, executor, status, worker_incarnation_id)"
            " VALUES (%(a)s, %(r)s, 1, 'remote_worker', %(s)s, %(i)s)",
            {"a": uuid7(), "r": run_id, "s": status, "i": incarnation})


def test_workers_list_incarnations_with_state_pool_and_attempts_held(api: ApiWorld) -> None:
    api.ctx.lease_ms = 30_000
    stopped = make_incarnation(api, "w1", stopped=True)
    silent = make_incarnation(api, "w1", seen_ago_s=3600)
    live = make_incarnation(api, "w2")
    hold(api, live, "running")
    hold(api, live, "claimed")
    hold(api, live, "succeeded")  # finished: not held
    answer = api.client.get("/v1/workers", headers=api.as_("viewer"))
    assert answer.status_code == 200, answer.text
    items = answer.json()["items"]
    assert [(w["id"], w["name"], w["state"], w["attempts_held"]) for w in items] == [
        (live, "w2", "live", 2), (silent, "w1", "silent", 0), (stopped, "w1", "stopped", 0)]
    assert items[0]["pool"] == "pool-a" and items[0]["labels"] == {"zone": "a"}
    assert items[0]["concurrency"] == 2 and items[2]["stopped_at"] is not None
    only = api.client.get("/v1/workers", params={"state": "silent"},
                          headers=api.as_("viewer")).json()["items"]
    assert [w["id"] for w in only] == [silent]
    seen, cursor = [], None
    while True:
        page = api.client.get("/v1/workers", params={"limit": 2, **(
            {"cursor": cursor} if cursor else {})}, headers=api.as_("viewer")).json()
        seen += [w["id"] for w in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [live, silent, stopped]
    assert api.client.get("/v1/workers", params={"state": "gone"},
                          headers=api.as_("viewer")).status_code == 422


def test_an_attempt_names_the_worker_that_claimed_it(api: ApiWorld) -> None:
    incarnation = make_incarnation(api, "w-named")
    run_id = make_run(api, make_task(api), 1, status="running")
    claimed, unclaimed = uuid7(), uuid7()
    api.sql("INSERT INTO attempts (id, run_id, number, executor, status, worker_incarnation_id)"
            " VALUES (%(a)s, %(r)s, 1, 'remote_worker', 'failed', %(i)s),"
            " (%(b)s, %(r)s, 2, 'remote_worker', 'lost', NULL)",
            {"a": claimed, "b": unclaimed, "r": run_id, "i": incarnation})
    detail = api.client.get(f"/v1/runs/{run_id}", headers=api.as_("viewer")).json()
    assert [(a["worker_incarnation_id"], a["worker_name"]) for a in detail["attempts"]] == [
        (incarnation, "w-named"), (None, None)]
    one = api.client.get(f"/v1/attempts/{claimed}", headers=api.as_("viewer")).json()
    assert one["worker_name"] == "w-named"
