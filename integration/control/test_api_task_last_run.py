"""Each task's ``last_run`` in ``GET /v1/tasks`` and ``GET /v1/tasks/{name}`` over real
PostgreSQL as the runtime role (issue 12 item 2, issue 13 item 2; ``api/task_last_run.py``):
the newest run whatever its status, its finish time and duration (to now while active), a
page read in one query whatever its size, walking ``runs_task_number_idx``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from api_world import ApiWorld
from sqlalchemy import event, select

from qinglong.control.api.task_last_run import with_last_run
from qinglong.control.db.tables import tasks
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def make_task(api: ApiWorld, name: str) -> str:
    answer = api.client.post("/v1/tasks", json={"name": name, "shell": "echo hi"},
                             headers=api.as_("admin"))
    assert answer.status_code == 201, answer.text
    assert answer.json()["last_run"] is None  # a new task never ran
    return str(answer.json()["id"])


def make_run(api: ApiWorld, task_id: str, number: int | None, status: str, *,
             started_ago_s: float | None = None, took_s: float | None = None) -> str:
    """A run of ``task_id``; started ``started_ago_s`` seconds ago (None: not started),
    finished ``took_s`` seconds after its start (None: not finished)."""
    run_id = uuid7()
    api.sql("INSERT INTO runs (id, project_id, task_id, owner, status, number, started_at,"
            " finished_at) VALUES (%(r)s, %(p)s, %(t)s, 'runtime', %(s)s, %(n)s,"
            " now() - make_interval(secs => %(a)s),"
            " now() - make_interval(secs => %(a)s) + make_interval(secs => %(d)s))",
            {"r": run_id, "p": api.ctx.project_id, "t": task_id, "s": status, "n": number,
             "a": started_ago_s, "d": took_s})
    return run_id


def listed(api: ApiWorld, **params: Any) -> dict[str, Any]:
    answer = api.client.get("/v1/tasks", params=params, headers=api.as_("viewer"))
    assert answer.status_code == 200, answer.text
    return {t["name"]: t["last_run"] for t in answer.json()["items"]}


def test_list_and_show_answer_the_newest_run_with_its_finish_time_and_duration(
        api: ApiWorld) -> None:
    never = make_task(api, "never")
    make_run(api, never, None, "succeeded", started_ago_s=60, took_s=1)  # pre-0005 row
    done = make_task(api, "done")
    make_run(api, done, 1, "succeeded", started_ago_s=600, took_s=5)
    failed = make_run(api, done, 2, "failed", started_ago_s=300, took_s=65.5)
    busy = make_task(api, "busy")
    make_run(api, busy, 1, "succeeded", started_ago_s=900, took_s=1)
    running = make_run(api, busy, 2, "running", started_ago_s=30)
    waiting = make_task(api, "waiting")
    queued = make_run(api, waiting, 7, "queued")

    last = listed(api)
    assert last["never"] is None
    assert {k: last["done"][k] for k in ("id", "number", "status", "duration_s")} == {
        "id": failed, "number": 2, "status": "failed", "duration_s": 65.5}
    (finished,) = api.sql("SELECT finished_at FROM runs WHERE id = %(r)s", {"r": failed})[0]
    assert datetime.fromisoformat(last["done"]["finished_at"]) == finished
    # an active run is the last run too: no finish time, its duration counts up to now
    assert (last["busy"]["id"], last["busy"]["status"], last["busy"]["finished_at"]) == (
        running, "running", None)
    assert 30 <= last["busy"]["duration_s"] < 3600
    assert last["waiting"] == {"id": queued, "number": 7, "status": "queued",
                               "finished_at": None, "duration_s": None}
    for name in ("never", "done", "busy", "waiting"):
        shown = api.client.get(f"/v1/tasks/{name}", headers=api.as_("viewer")).json()
        assert (shown["last_run"] or {}).get("id") == (last[name] or {}).get("id")
    assert api.client.get("/v1/tasks/done", headers=api.as_("viewer")).json()[
        "last_run"] == last["done"]
    edited = api.client.patch("/v1/tasks/done", json={"max_attempts": 2},
                              headers=api.as_("admin"))
    assert edited.json()["last_run"]["id"] == failed
    # a run of a removed task of the same name is not the new task's last run
    api.client.delete("/v1/tasks/done", headers=api.as_("admin"))
    make_task(api, "done")
    assert listed(api)["done"] is None


@pytest.fixture
def run_queries(api: ApiWorld) -> Iterator[list[str]]:
    """The statements the API's engine sends that read ``runs``, while the test runs."""
    seen: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        if " runs" in statement:
            seen.append(statement)

    event.listen(api.engine, "before_cursor_execute", record)
    yield seen
    event.remove(api.engine, "before_cursor_execute", record)


def test_a_page_reads_every_last_run_in_one_query(api: ApiWorld,
                                                  run_queries: list[str]) -> None:
    for n in range(6):
        task_id = make_task(api, f"t{n}")
        for number in range(1, n + 1):
            make_run(api, task_id, number, "succeeded", started_ago_s=100 - number, took_s=1)
    run_queries.clear()
    last = listed(api, limit=5)
    assert [last[f"t{n}"] and last[f"t{n}"]["number"] for n in range(5)] == [
        None, 1, 2, 3, 4]
    assert len(run_queries) == 1 and "LATERAL" in run_queries[0]
    run_queries.clear()
    assert listed(api, limit=1) == {"t0": None}
    assert len(run_queries) == 1


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


@pytest.mark.parametrize(("task_count", "runs_each"), [(200, 100), (3, 20_000)])
def test_the_page_query_walks_the_runs_index_by_task_never_a_scan_of_runs(
        api: ApiWorld, task_count: int, runs_each: int) -> None:
    """Many tasks with a short history, and a few with a long one (where a backward walk
    of the primary key, filtering on the task, would look cheap to the planner): each
    task's newest run is one step of ``runs_task_number_idx``."""
    api.sql("INSERT INTO tasks (id, project_id, name, log_retention_s, shell)"
            " SELECT gen_random_uuid(), %(p)s, 'busy' || g, 0, 'true'"
            " FROM generate_series(1, %(n)s) AS g", {"p": api.ctx.project_id, "n": task_count})
    api.sql("INSERT INTO runs (id, project_id, task_id, owner, status, number)"
            " SELECT gen_random_uuid(), %(p)s, t.id, 'runtime', 'succeeded', g"
            " FROM tasks t CROSS JOIN generate_series(1, %(n)s) AS g",
            {"p": api.ctx.project_id, "n": runs_each})
    api.sql("ANALYZE runs")
    api.sql("ANALYZE tasks")
    query = with_last_run(select(tasks)).where(tasks.c.project_id == api.ctx.project_id,
                                               tasks.c.deleted_at.is_(None)).limit(50)
    compiled = query.compile(dialect=api.engine.dialect,
                             compile_kwargs={"render_postcompile": True})
    with api.engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + str(compiled),
                                    compiled.params).scalar()
    scans = [n for n in _plan_nodes(plan[0]["Plan"])
             if n.get("Relation Name") == "runs"]
    assert [(n["Node Type"], n["Index Name"], n["Scan Direction"]) for n in scans] == [
        ("Index Scan", "runs_task_number_idx", "Backward")]
    assert scans[0]["Actual Loops"] == min(50, task_count) and scans[0]["Actual Rows"] == 1
