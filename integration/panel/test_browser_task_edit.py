"""Renaming a task and editing its labels in the local task form, and the owner's refusals
worded in the viewer's language (docs/panel.md "Task form"), in a real browser against a
real `ql3 local serve` and `ql3 local web`. Screenshots go to ``$QL3_ARTIFACTS_DIR/panel``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_browser import PHONE, World, _axe_serious, _shot, signed_in_world

from harness import Ql3

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-task-edit") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    ql3.run("local", "task", "add", "签到", "--schedule", "0 8 * * *", "--label", "日常",
            "--label", "旧", "--", "echo", "签到成功")
    ql3.run("local", "task", "add", "淘宝签到", "--schedule", "0 9 * * *", "--", "true")
    ql3.run("local", "task", "add", "旧任务", "--schedule", "@once", "--", "true")
    ql3.run("local", "run", "旧任务")
    ql3.run("local", "task", "rm", "旧任务")
    with signed_in_world(ql3, chromium) as world:
        yield world


def test_rename_and_relabel_in_the_form_keep_the_task_and_its_runs(world: World) -> None:
    before = world.ql3.json("local", "task", "show", "签到")
    world.ql3.run("local", "run", "签到", "--wait")
    page = world.page("zh-CN")
    page.goto(world.web.base + "/tasks/签到/edit")
    name = page.get_by_label("名称", exact=True)
    assert name.get_attribute("readonly") is None
    assert "改名后" in page.locator("#name-hint").inner_text()
    name.fill("京东签到")
    page.get_by_label("标签").fill("日常，京东")  # a full-width comma separates too
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/?q=*")
    row = page.locator("tr", has_text="京东签到")
    assert row.count() == 1 and "京东" in row.inner_text() and "旧" not in row.inner_text()
    after = world.ql3.json("local", "task", "show", "京东签到")
    assert (after["id"], after["labels"]) == (before["id"], ["日常", "京东"])
    assert [r["task"] for r in after["recent_runs"]] == ["京东签到"]
    assert world.ql3.run("local", "logs", "京东签到#1").stdout == "签到成功\n"


@pytest.mark.parametrize(("locale", "env_says", "name_says"), [
    ("zh-CN", "变量名只能用 ASCII 字母", "已删除的同名任务的运行记录仍归在这个名称下"),
    ("en-US", "Variable names use ASCII letters", "A removed task of this name keeps its runs"),
])
def test_owner_refusals_come_back_in_the_viewers_language(
        world: World, locale: str, env_says: str, name_says: str) -> None:
    """A variable name the owner refuses is worded beside its field, and a name a removed
    task's runs are numbered under in the banner, both from the catalogs (never the owner's
    English); nothing is changed."""
    page = world.page(locale, PHONE)
    page.goto(world.web.base + "/tasks/淘宝签到/edit")
    page.locator("#env").fill("1BAD=x")
    page.get_by_role("button", name="保存" if locale == "zh-CN" else "Save").click()
    assert page.locator("#env").get_attribute("aria-invalid") == "true"
    assert env_says in page.locator("#env-error").inner_text()
    assert "must match" not in page.content()
    assert _axe_serious(page) == []
    _shot(page, f"task-rename-error-{locale}-phone")
    page.locator("#env").fill("")
    page.locator("#name").fill("旧任务")
    page.get_by_role("button", name="保存" if locale == "zh-CN" else "Save").click()
    assert name_says in page.get_by_role("alert").first.inner_text()
    assert "keeps its runs under that name" not in page.content()
    assert page.locator("#name").input_value() == "旧任务"  # what was typed is shown back
    events = world.ql3.json("local", "task", "show", "淘宝签到")["events"]
    assert [e["kind"] for e in events] == ["task_created"]
    assert world.ql3.run("local", "task", "show", "旧任务", check=False).returncode == 2
