"""The task form, bulk actions and Runs page in a real browser (docs/panel.md "Pages"):
Debian's chromium-headless-shell through playwright, against a real `ql3 local serve` and
`ql3 local web`. Screenshots (desktop and 375 px, zh-CN and English) go to
``$QL3_ARTIFACTS_DIR/panel``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_browser import DESKTOP, PHONE, World, _axe_serious, _shot, signed_in_world

from harness import Ql3, wait_for

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")

EVIL = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-pages") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    for i in range(3):
        ql3.run("local", "task", "add", f"维护-{i}", "--schedule", f"{i} 3 * * *",
                "--label", "维护", "--", "true")
    with signed_in_world(ql3, chromium) as world:
        yield world


def test_create_a_chinese_task_in_the_form_run_it_and_read_its_log(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.get_by_role("link", name="新建任务").click()
    page.wait_for_url("**/tasks/new")
    page.get_by_label("名称", exact=True).fill("京东签到")
    page.get_by_label("时区").fill("Asia/Shanghai")
    page.get_by_label("定时规则（cron，可带秒）").fill("15 30 9 * * *")
    preview = page.locator("#preview")
    # the htmx partial follows the typing: five times at 09:30:15 in Shanghai
    wait_for(lambda: preview.locator("time", has_text="09:30:15").count() == 5, 15)
    assert preview.locator("time", has_text="09:30:15").count() == 5
    assert "Asia/Shanghai" in preview.inner_text()
    page.get_by_label("命令").fill(f"sh -c 'echo 京东签到开始; echo \"{EVIL}\"; echo 完成'")
    page.get_by_label("新增或替换机密变量").fill("JD_COOKIE=pt_key=不可见的值")
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/?q=*")
    row = page.locator("tr", has_text="京东签到")
    row.get_by_role("button", name="运行 京东签到").click()
    page.wait_for_url("**/runs/*")
    log = page.locator("#log")
    log.get_by_text("京东签到开始").wait_for(timeout=20_000)
    page.locator("#log[data-done='true']").wait_for(timeout=20_000)
    assert EVIL in log.inner_text()  # output is text, never markup
    assert log.locator("script, img").count() == 0
    assert page.evaluate("window.__pwned") is None
    # the secret is masked on the edit page, its value never shown again
    page.goto(world.web.base + "/tasks/京东签到/edit")
    secrets = page.locator("fieldset")
    assert "JD_COOKIE" in secrets.inner_text() and "********" in secrets.inner_text()
    assert "不可见的值" not in page.content()
    assert world.csp_errors == [], world.csp_errors[0][:400]


def test_a_refused_schedule_is_shown_beside_its_field(world: World) -> None:
    page = world.page("en-US")
    page.goto(world.web.base + "/tasks/new")
    page.get_by_label("Name").fill("坏的定时")
    page.get_by_label("Schedule (cron, seconds optional)").fill("61 * * * *")
    page.get_by_label("Command").fill("true")
    page.get_by_role("button", name="Save").click()
    field = page.get_by_label("Schedule (cron, seconds optional)")
    assert field.get_attribute("aria-invalid") == "true"
    assert page.locator("#schedule-error").is_visible()
    assert _axe_serious(page) == []
    _shot(page, "task-form-error-en-desktop")


def test_bulk_disable_three_tasks(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/?q=维护")
    for i in range(3):
        page.get_by_label(f"选择 维护-{i}").check()
    page.locator("form#bulk").get_by_role("button", name="禁用", exact=True).click()
    # the answer returns to the list as shown: the search kept, the count added
    page.wait_for_url(lambda url: "done=3" in url and "q=%E7%BB%B4%E6%8A%A4" in url)
    assert "已处理 3 个任务" in page.locator("[role=status]").inner_text()
    states = {t["name"]: t["enabled"] for t in world.ql3.json("local", "task", "list")}
    assert [states[f"维护-{i}"] for i in range(3)] == [False, False, False]
    page.goto(world.web.base + "/?q=维护")
    assert page.locator("td", has_text="已禁用").count() == 3


def test_add_a_secret_variable_and_see_it_masked(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.get_by_role("link", name="环境变量").click()
    page.wait_for_url("**/vars")
    page.get_by_label("名称", exact=True).fill("JD_COOKIE")
    page.get_by_label("值", exact=True).fill("pt_key=绝不显示")
    page.get_by_label("备注").fill("京东账号一")
    # secret unless unticked, as `vars set` is secret unless --plain
    assert page.get_by_label("机密（保存后不再显示值）").is_checked()
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/vars")
    row = page.locator("tr", has_text="JD_COOKIE")
    assert "********" in row.inner_text() and "京东账号一" in row.inner_text()
    assert "绝不显示" not in page.content()
    page.get_by_label("名称", exact=True).fill("UA")
    page.get_by_label("值", exact=True).fill(EVIL)
    page.get_by_label("机密（保存后不再显示值）").uncheck()
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/vars")
    assert EVIL in page.locator("tr", has_text="UA").inner_text()  # a value is text
    assert page.evaluate("window.__pwned") is None
    with page.expect_download() as download:
        page.get_by_role("link", name="导出为 NAME=value 行（不含机密）").click()
    assert Path(download.value.path()).read_text() == f"UA=\"{EVIL}\"\n"
    assert world.ql3.json("local", "vars", "show", "JD_COOKIE")["secret"] is True
    assert world.csp_errors == []


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_form_and_runs_pages_pass_axe_at_desktop_and_375px(world: World, locale: str) -> None:
    lang = "zh-CN" if locale == "zh-CN" else "en"
    for label, viewport in (("desktop", DESKTOP), ("375px", PHONE)):
        page = world.page(locale, viewport)
        for name, path in (("task-form", "/tasks/new"), ("runs", "/runs"), ("tasks", "/"),
                           ("vars", "/vars"), ("dashboard", "/dashboard")):
            page.goto(world.web.base + path)
            assert page.locator("html").get_attribute("lang") == lang
            assert _axe_serious(page) == [], (name, label)
            if viewport is PHONE:
                assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            _shot(page, f"{name}-{lang}-{label}")
        page.context.close()
    assert world.csp_errors == []


def test_a_tasks_occurrences_read_as_a_timeline_with_runs_linked(world: World) -> None:
    """Every slot of an every-second task: runs (linked) and the slots skipped while one
    ran (policy forbid), newest first, from the task's row; at 375 px it still fits."""
    world.ql3.run("local", "task", "add", "每秒签到", "--schedule", "* * * * * *",
                  "--timezone", "Asia/Shanghai", "--concurrency", "forbid", "--",
                  "sh", "-c", "sleep 2")
    try:
        page = world.page("zh-CN")
        page.goto(world.web.base + "/?q=每秒签到")
        page.get_by_role("link", name="调度记录 每秒签到").click()
        page.wait_for_url("**/tasks/*/occurrences")
        timeline = page.locator("#occurrences")

        def both_seen() -> bool:
            page.reload()
            return (timeline.locator("li[data-outcome=run_created]").count() >= 2
                    and timeline.locator("li[data-outcome=skipped_active]").count() >= 1)

        wait_for(both_seen, 60)
    finally:
        world.ql3.run("local", "task", "disable", "每秒签到")
    assert page.locator("h1").inner_text() == "每秒签到 的调度记录"
    skipped = timeline.locator("li[data-outcome=skipped_active]").first
    assert "已跳过：上一次运行仍在进行（并发策略 forbid）" in skipped.inner_text()
    ran = timeline.locator("li[data-outcome=run_created]")
    assert "已运行" in ran.first.inner_text()
    # newest first: the first entry's run has the highest number shown
    numbers = [int(t.split("#", 1)[1]) for t in ran.locator("a.occ-run").all_inner_texts()]
    assert numbers == sorted(numbers, reverse=True) and numbers[-1] >= 1
    slot = ran.first.locator("time").first.get_attribute("datetime")
    assert slot is not None and slot.endswith("Z")
    assert _axe_serious(page) == []
    _shot(page, "occurrences-zh-CN-desktop")
    ran.last.locator("a.occ-run").click()
    page.wait_for_url("**/runs/*")
    assert page.locator("#run-status").count() == 1
    phone = world.page("en-US", PHONE)
    phone.goto(world.web.base + "/tasks/每秒签到/occurrences")
    assert phone.locator("h1").inner_text() == "Occurrences of 每秒签到"
    assert "Skipped: a run was still in progress (policy forbid)" in phone.locator(
        "#occurrences").inner_text()
    assert phone.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert _axe_serious(phone) == []
    _shot(phone, "occurrences-en-375px")
    # the local panel has no workers: no header link, and the page is not served
    assert phone.locator("header a[href$='/workers']").count() == 0
    assert phone.request.get(world.web.base + "/workers").status == 501
    assert world.csp_errors == []
