"""The cluster's task form at ``/ui`` in a real browser against a real ``ql3 control serve``,
worker, PostgreSQL and moto (docs/panel.md "Cluster", Task form): two admins edit
``签到`` at once — the second save is refused in the viewer's language with everything typed
kept, nothing overwritten —; the task is renamed ``京东签到`` keeping its id and runs; a
name another task has is refused beside the field; the edit form fits 375 px. A shell line
with ``&&`` is taken as the shell line it is: the cluster runs the command through
``/bin/sh -c``, so the local form's shell-operator refusal does not apply."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
import test_cluster_task_form
from test_cluster_browser import World, _shot
from test_cluster_task_form import PHONE, _fits, _page, _task

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
OLD = "签到"
NEW = "京东签到"
OTHER = "淘宝签到"
CHANGED_ZH = "任务在此期间已被更改"
CHANGED_EN = "The task was changed meanwhile"
cluster_form_world = test_cluster_task_form.world  # a fixture here too, by this name


@pytest.fixture(scope="module")
def world(cluster_form_world: World) -> World:
    """test_cluster_task_form's cluster (control, a worker, a bundle) and browser."""
    return cluster_form_world


def _made(world: World, name: str, **over: Any) -> dict[str, Any]:
    body = {"name": name, "shell": "echo 签到成功", "schedule": "0 8 * * *",
            "timezone": "Asia/Shanghai", "concurrency_policy": "allow", **over}
    answer = world.api.post("/v1/tasks", json=body)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


def _edit(world: World, page: Any, name: str) -> None:
    page.goto(world.base + f"/tasks/{quote(name)}/edit")
    page.locator("#name").wait_for()


def test_a_stale_edit_is_refused_with_the_input_kept_then_a_rename_keeps_the_runs(
        world: World) -> None:
    made = _made(world, OLD)
    run = world.api.post(f"/v1/tasks/{quote(OLD)}/run")
    assert run.status_code == 201, run.text
    first = _page(world, world.cluster.token("admin", name="管理员-甲"))
    second = _page(world, world.cluster.token("admin", name="管理员-乙"))
    _edit(world, first, OLD)
    _edit(world, second, OLD)
    assert first.locator("input[name=version]").get_attribute("value") == str(
        made["version"])
    # the second admin saves first
    second.fill("#schedule", "0 9 * * *")
    second.get_by_role("button", name="保存").click()
    second.wait_for_url("**/ui/?q=*")
    # the first one's save, from the version before it: refused, said in Chinese, kept
    first.fill("#command", "echo 改过的命令")
    first.fill("#attempts", "3")
    first.get_by_role("button", name="保存").click()
    banner = first.locator("p[role=alert]", has_text=CHANGED_ZH)
    banner.wait_for()
    assert first.input_value("#command") == "echo 改过的命令"
    assert first.input_value("#attempts") == "3" and first.input_value("#name") == OLD
    task = _task(world, OLD)
    assert (task["schedule"], task["shell"], task["max_attempts"]) == (
        "0 9 * * *", "echo 签到成功", 1)
    _shot(first, "cluster-form-stale-zh-CN")

    # opened again: the current version; the name field renames (a Chinese name)
    _edit(world, first, OLD)
    assert "运行记录" in first.locator("#name-hint").inner_text()
    first.fill("#name", NEW)
    first.get_by_role("button", name="保存").click()
    first.wait_for_url("**/ui/?q=*")
    assert first.locator("tr", has_text=NEW).count() == 1
    renamed = _task(world, NEW)
    assert (renamed["id"], renamed["schedule"]) == (made["id"], "0 9 * * *")
    assert renamed["next_fire_at"] == task["next_fire_at"]
    assert world.api.get(f"/v1/tasks/{quote(OLD)}").status_code == 404
    runs = world.api.get("/v1/runs", params={"task": NEW}).json()["items"]
    assert [r["id"] for r in runs] == [run.json()["id"]]

    # a name another live task has: refused beside the field, nothing else lost
    _made(world, OTHER)
    _edit(world, first, NEW)
    first.fill("#name", OTHER)
    first.fill("#labels", "platform=jd")
    first.get_by_role("button", name="保存").click()
    error = first.locator("#name-error")
    error.wait_for()
    assert error.inner_text() == "已经有同名的任务。"
    assert first.locator("#name").get_attribute("aria-invalid") == "true"
    assert first.input_value("#name") == OTHER
    assert first.input_value("#labels") == "platform=jd"
    assert _task(world, NEW)["labels"] == {} and _task(world, OTHER)["id"] != made["id"]
    first.context.close()
    second.context.close()


def test_an_english_stale_edit_and_the_edit_form_at_375_px(world: World) -> None:
    name = "京东-英文"
    _made(world, name)
    page = _page(world, world.cluster.token("admin"), locale="en-US")
    _edit(world, page, name)
    changed = world.api.post(f"/v1/tasks/{quote(name)}/disable")  # an operator's change
    assert changed.status_code == 200, changed.text
    page.fill("#timeout", "30")
    page.get_by_role("button", name="Save").click()
    page.locator("p[role=alert]", has_text=CHANGED_EN).wait_for()
    assert page.input_value("#timeout") == "30"
    assert _task(world, name)["timeout_s"] is None
    page.context.close()
    for locale in ("zh-CN", "en-US"):
        phone = _page(world, world.cluster.token("admin"), locale=locale, viewport=PHONE)
        _edit(world, phone, name)
        assert _fits(phone), locale
        phone.context.close()


def test_a_shell_line_with_operators_is_taken_as_a_shell_line(world: World) -> None:
    page = _page(world, world.cluster.token("admin"))
    page.goto(world.base + "/tasks/new")
    page.fill("#name", "京东-管道")
    page.fill("#schedule", "@once")
    page.fill("#command", "echo 京东 && echo 完成 | cat > /dev/null")
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/ui/?q=*")
    task = _task(world, "京东-管道")
    assert (task["shell"], task["argv"]) == ("echo 京东 && echo 完成 | cat > /dev/null", None)
    page.context.close()
