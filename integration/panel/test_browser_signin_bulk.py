"""Getting back in after signing out, and bulk actions on a filtered Tasks list, in a real
browser against a real `ql3 local serve` and `ql3 local web` (docs/panel.md "Running it",
"Tasks"). Screenshots go to ``$QL3_ARTIFACTS_DIR/panel``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from panel_harness import LINK
from test_browser import PHONE, World, _axe_serious, _shot, signed_in_world

from harness import Ql3

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-signin-bulk") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    for i in range(10):
        ql3.run("local", "task", "add", f"jd_{i:02d}", "--schedule", f"{i} 7 * * *", "--",
                "true")
    for i in range(3):
        ql3.run("local", "task", "add", f"tb_{i}", "--schedule", f"{i} 6 * * *", "--", "true")
    with signed_in_world(ql3, chromium) as world:
        yield world


def _new_link(ql3: Ql3) -> str:
    out = ql3.run("local", "web", "--new-link").stdout
    match = LINK.search(out)
    assert match, out
    return match.group(0)


def test_bulk_disable_keeps_the_search_and_select_all_ticks_the_rows_shown(
        world: World) -> None:
    page = world.page("zh-CN", PHONE)
    page.goto(world.web.base + "/?q=jd_")
    boxes = page.locator("input[name=names]")
    assert boxes.count() == 10
    select_all = page.get_by_role("checkbox", name="全选本页显示的任务")
    select_all.focus()  # reachable from the keyboard, ticked with Space
    page.keyboard.press("Space")
    assert all(boxes.nth(i).is_checked() for i in range(10))
    boxes.nth(0).uncheck()
    assert page.evaluate("document.getElementById('select-all').indeterminate") is True
    select_all.check()
    _shot(page, "tasks-select-all-zh-CN-375")
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.locator("#bulk").get_by_role("button", name="禁用").click()
    page.wait_for_url("**done=10**")
    query = parse_qs(urlsplit(page.url).query)
    assert query["q"] == ["jd_"] and query["done"] == ["10"] and query["failed"] == ["0"]
    assert page.locator("#q").input_value() == "jd_"
    assert page.locator("input[name=names]").count() == 10  # the filtered list, again
    assert page.get_by_role("status").filter(has_text="10").count() == 1
    shown = {t["name"]: t["enabled"] for t in world.ql3.json("local", "task", "list")}
    assert not any(shown[f"jd_{i:02d}"] for i in range(10))
    assert all(shown[f"tb_{i}"] for i in range(3))  # outside the filter: untouched
    assert _axe_serious(page) == []
    assert world.csp_errors == [], world.csp_errors[0][:400]


def test_after_sign_out_the_page_says_how_to_get_a_new_link_and_it_works(
        world: World) -> None:
    context = world.browser.new_context(locale="zh-CN", viewport=PHONE)
    page = context.new_page()
    page.goto(world.web.base + "/signin")  # no link at all: not "used"
    assert "请用一次性登录链接打开面板" in page.locator("main").inner_text()
    assert "已被使用" not in page.locator("main").inner_text()
    page.goto(world.web.base + "/signin?token=wrong-token")
    assert "此登录链接错误或已被使用" in page.locator("#signin-state").inner_text()
    link = _new_link(world.ql3)  # the command the page names
    page.goto(link)
    assert page.url.rstrip("/") == world.web.base
    page.get_by_role("button", name="退出登录").click()
    page.wait_for_url("**/signin**")
    main = page.locator("main").inner_text()
    assert "你已退出登录" in main and "错误或已被使用" not in main
    assert "面板未设置密码" in page.locator("#signin-no-password").inner_text()
    assert page.locator("pre code").inner_text() == "ql3 local web --new-link"
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert _axe_serious(page) == []
    _shot(page, "signed-out-zh-CN-375")
    page.goto(link)  # a used link stays used
    assert "错误或已被使用" in page.locator("#signin-state").inner_text()
    first, second = _new_link(world.ql3), _new_link(world.ql3)
    page.goto(first)  # replaced by the newer one
    assert "错误或已被使用" in page.locator("#signin-state").inner_text()
    page.goto(second)
    assert page.url.rstrip("/") == world.web.base
    assert page.get_by_role("button", name="退出登录").count() == 1
    context.close()
    english = world.browser.new_context(locale="en").new_page()
    english.goto(world.web.base + "/signin")
    assert "ql3 local web --new-link" in english.locator("main").inner_text()
    assert "No panel password is set" in english.locator("main").inner_text()
