"""``PATCH /v1/tasks/{name}`` with ``version`` and ``name`` over real PostgreSQL as the runtime
role (docs/protocols.md §4.5, Editing a task): a stale version is 409 ``task_changed`` and
changes nothing, no version edits as before; a rename keeps the id, runs, numbering, history
and the next fire time, frees the old name, and a name a live task holds (in any spelling of
its key) is 409 ``task_exists``."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from api_world import ApiWorld

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
OLD = "签到"
NEW = "京东签到"


def _task(name: str, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "shell": "echo 签到成功", "schedule": "0 8 * * *",
                            "timezone": "Asia/Shanghai", "concurrency_policy": "allow"}
    body.update(over)
    return body


def _path(name: str) -> str:
    return "/v1/tasks/" + quote(name)


def test_a_stale_version_is_409_and_changes_nothing(api: ApiWorld) -> None:
    admin = api.as_("admin")
    made = api.client.post("/v1/tasks", json=_task(OLD), headers=admin)
    assert made.status_code == 201, made.text
    read = made.json()["version"]
    first = api.client.patch(_path(OLD), json={"max_attempts": 2, "version": read},
                             headers=admin)
    assert first.status_code == 200, first.text
    assert first.json()["version"] == read + 1
    # a second editor who read the same version: refused, the first edit stands
    stale = api.client.patch(_path(OLD), json={"max_attempts": 5, "schedule": "0 9 * * *",
                                               "version": read}, headers=admin)
    assert stale.status_code == 409, stale.text
    error = stale.json()["error"]
    assert error["code"] == "task_changed" and "read it again" in error["message"]
    now = api.client.get(_path(OLD), headers=api.as_("viewer")).json()
    assert (now["max_attempts"], now["schedule"], now["version"]) == (2, "0 8 * * *",
                                                                      read + 1)
    assert [e["kind"] for e in now["history"]] == ["edited", "created"]
    # enabling or disabling is a change too: an edit read before it is stale
    current = now["version"]
    api.client.post(_path(OLD) + "/disable", headers=api.as_("operator"))
    assert api.client.patch(_path(OLD), json={"enabled": True, "version": current},
                            headers=admin).json()["error"]["code"] == "task_changed"
    # the current version goes through; no version at all edits as before
    fresh = api.client.get(_path(OLD), headers=admin).json()["version"]
    done = api.client.patch(_path(OLD), json={"max_attempts": 3, "version": fresh},
                            headers=admin)
    assert done.status_code == 200 and done.json()["max_attempts"] == 3
    plain = api.client.patch(_path(OLD), json={"max_attempts": 4}, headers=admin)
    assert plain.status_code == 200 and plain.json()["max_attempts"] == 4
    # version is not a field of the task: null or a string is refused, never stored
    for bad in ({"version": None}, {"version": "3"}, {"version": -1}):
        refused = api.client.patch(_path(OLD), json=bad, headers=admin)
        assert refused.status_code == 422, (bad, refused.text)
    assert api.sql("SELECT count(*) FROM information_schema.columns WHERE table_name ="
                   " 'tasks' AND column_name = 'if_version'") == [(0,)]


def test_a_rename_keeps_id_runs_numbering_history_and_schedule(api: ApiWorld) -> None:
    admin, operator = api.as_("admin"), api.as_("operator")
    made = api.client.post("/v1/tasks", json=_task(OLD), headers=admin).json()
    runs = [api.client.post(_path(OLD) + "/run", headers=operator).json() for _ in range(2)]
    assert [r["number"] for r in runs] == [1, 2]
    (before,) = api.sql("SELECT schedule_version, next_fire_at FROM tasks WHERE id = %(i)s",
                        {"i": made["id"]})
    renamed = api.client.patch(_path(OLD), json={"name": NEW, "version": made["version"]},
                               headers=admin)
    assert renamed.status_code == 200, renamed.text
    view = renamed.json()
    assert (view["id"], view["name"], view["version"]) == (made["id"], NEW,
                                                           made["version"] + 1)
    assert view["history"][0]["kind"] == "edited"
    assert view["history"][0]["detail"]["fields"] == ["name"]
    assert view["last_run"]["number"] == 2
    # the scheduler's fence and slot are untouched: the schedule goes on as it was
    assert api.sql("SELECT schedule_version, next_fire_at FROM tasks WHERE id = %(i)s",
                   {"i": made["id"]}) == [before]
    assert api.client.get(_path(OLD), headers=admin).status_code == 404
    # runs and references follow the task: NEW#2, runs --task NEW, and numbering goes on
    ref = api.client.get("/v1/runs/resolve", params={"ref": f"{NEW}#2"}, headers=admin)
    assert ref.status_code == 200 and ref.json()["id"] == runs[1]["id"], ref.text
    listed = api.client.get("/v1/runs", params={"task": NEW}, headers=admin).json()
    assert sorted(r["id"] for r in listed["items"]) == sorted(r["id"] for r in runs)
    assert {r["task_name"] for r in listed["items"]} == {NEW}
    third = api.client.post(_path(NEW) + "/run", headers=operator).json()
    assert third["number"] == 3
    # the old name is free again, and a lookup by the new name's key finds the task
    again = api.client.post("/v1/tasks", json=_task(OLD), headers=admin)
    assert again.status_code == 201 and again.json()["id"] != made["id"]
    assert api.client.get(_path("京东签到"), headers=admin).json()["id"] == made["id"]


def test_a_taken_or_invalid_name_is_refused_and_nothing_changes(api: ApiWorld) -> None:
    admin = api.as_("admin")
    one = api.client.post("/v1/tasks", json=_task("Backup-Ａ"), headers=admin).json()
    api.client.post("/v1/tasks", json=_task(NEW), headers=admin)
    # a live task's name, in its own spelling or another of its key (case, full width)
    for taken in ("Backup-Ａ", "backup-a"):
        refused = api.client.patch(_path(NEW), json={"name": taken, "max_attempts": 7},
                                   headers=admin)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"]["code"] == "task_exists"
    assert api.client.get(_path(NEW), headers=admin).json()["max_attempts"] == 1
    # its own name is no rename: the rest of the edit applies
    same = api.client.patch(_path(NEW), json={"name": NEW, "max_attempts": 7}, headers=admin)
    assert same.status_code == 200 and same.json()["history"][0]["detail"]["fields"] == [
        "max_attempts"]
    for bad in ("a/b", "", "x" * 129, "签到#3"):
        refused = api.client.patch(_path(NEW), json={"name": bad}, headers=admin)
        assert refused.status_code == 422, (bad, refused.text)
        assert "1-128 characters" in refused.json()["error"]["message"]
        assert not bad or bad not in refused.text
    assert api.client.patch(_path(NEW), json={"name": None}, headers=admin).status_code == 422
    assert api.client.get(_path(NEW), headers=admin).json()["name"] == NEW
    assert api.client.get(_path("Backup-Ａ"), headers=admin).json()["id"] == one["id"]
    # a case-only rename keeps the task's own key: allowed
    case = api.client.patch(_path("Backup-Ａ"), json={"name": "BACKUP-Ａ"}, headers=admin)
    assert case.status_code == 200 and case.json()["name"] == "BACKUP-Ａ"
