"""The panel in a real browser (docs/panel.md "Tests"): Debian's chromium-headless-shell
driven by Python playwright through ``executable_path`` (no browser download), against a
real `ql3 local serve` and `ql3 local web`. One browser for the module.

Screenshots (desktop and 375 px, zh-CN and English) go to ``$QL3_ARTIFACTS_DIR/panel``
(default ``./test-artifacts/panel``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from panel_harness import Web, close_contexts, start_web

from harness import Ql3, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium-headless-shell") or "/usr/bin/chromium-headless-shell"
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
ARTIFACTS = Path(os.environ.get("QL3_ARTIFACTS_DIR", ROOT / "test-artifacts")) / "panel"
EVIL = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 740}

if not Path(CHROMIUM).exists():  # scripts/test.sh installs it
    pytest.skip("chromium-headless-shell is not installed (apt-get install "
                "chromium-headless-shell fonts-wqy-microhei)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")


@dataclass
class World:
    ql3: Ql3
    web: Web
    browser: Any
    state: dict[str, Any]  # the signed-in cookies (the link works once)
    csp_errors: list[str] = field(default_factory=list)

    def page(self, locale: str, viewport: dict[str, int] = DESKTOP) -> Any:
        context = self.browser.new_context(storage_state=self.state, locale=locale,
                                           viewport=viewport)
        page = context.new_page()
        page.on("console", lambda m: self.csp_errors.append(m.text)
                if "Content Security Policy" in m.text else None)
        # a static file the page asks for and does not get (an icon a stylesheet names)
        # counts with the CSP errors: every test that asserts none sees it
        page.on("response", lambda r: self.csp_errors.append(f"{r.status} {r.url}")
                if r.status >= 400 and "/static/" in r.url else None)
        return page


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-browser") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    ql3.run("local", "task", "add", "jd-sign", "--schedule", "0 8 * * *", "--timezone",
            "Asia/Shanghai", "--label", "京东签到", "--", "sh", "-c",
            f"echo 京东签到 开始; printf '\\033[32m成功\\033[0m\\n'; echo '{EVIL}'; "
            "sleep 2; echo 京东签到 完成")
    ql3.run("local", "task", "add", "many-lines", "--schedule", "0 4 * * *", "--", "sh", "-c",
            "i=0; while [ $i -lt 6500 ]; do echo \"第 $i 行\"; i=$((i+1)); done")
    for i in range(3):
        ql3.run("local", "task", "add", f"chore-{i}", "--schedule", f"{i} 3 * * *",
                "--label", "维护", "--", "true")
    with signed_in_world(ql3, chromium) as world:
        yield world


@contextmanager
def signed_in_world(ql3: Ql3, browser: Any) -> Iterator[World]:
    """A real `ql3 local serve` and `ql3 local web` on ``ql3``'s data directory and
    ``browser`` (the session's ``chromium``) signed in through the one-time link (its
    cookies kept for every page the tests open); serve and web stopped at the end, the
    browser contexts left open closed."""
    serve = ql3.start_serve()
    web = start_web(ql3)
    try:
        context = browser.new_context(locale="zh-CN")
        page = context.new_page()
        page.goto(web.link)
        assert page.url.rstrip("/") == web.base  # the link signed in and redirected
        state = context.storage_state()
        context.close()
        try:
            yield World(ql3, web, browser, state)
        finally:
            close_contexts(browser)
    finally:
        web.stop()
        ql3.stop_serve(serve)


def _axe_serious(page: Any) -> list[str]:
    page.evaluate(AXE.read_text() + "\n;0")  # evaluated by the driver, not a page script
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    return [f"{v['id']}: {v['help']}" for v in result["violations"]
            if v["impact"] in ("serious", "critical")]


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_run_a_task_and_watch_its_log_live_with_output_as_text(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    assert page.locator("html").get_attribute("lang") == "zh-CN"
    row = page.locator("tr", has_text="jd-sign")
    assert "京东签到" in row.inner_text() and "Asia/Shanghai" in row.inner_text()
    row.get_by_role("button", name="运行 jd-sign").click()
    page.wait_for_url("**/runs/*")
    log = page.locator("#log")
    log.get_by_text("京东签到 开始").wait_for(timeout=20_000)
    assert log.get_attribute("data-done") is None  # seen while the run still runs
    log.get_by_text("京东签到 完成").wait_for(timeout=20_000)
    wait_for(lambda: log.get_attribute("data-done") == "true", 20)
    assert EVIL in log.inner_text()  # task output is text, never markup
    assert log.locator("script, img").count() == 0
    assert page.evaluate("window.__pwned") is None
    assert log.locator(".ansi-green-fg", has_text="成功").count() == 1
    assert page.locator("#run-status").inner_text() == "成功"  # the status, in Chinese
    assert world.csp_errors == [], world.csp_errors[0][:400]
    _shot(page, "run-zh-CN-desktop")


def test_a_long_log_keeps_5000_lines_in_the_page_and_downloads_whole(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.locator("tr", has_text="many-lines").get_by_role("button", name="运行 many-lines").click()
    page.wait_for_url("**/runs/*")
    page.locator("#log[data-done='true']").wait_for(timeout=30_000)
    log = page.locator("#log")
    assert log.locator(".line").count() == 5000
    assert log.locator(".line").last.inner_text() == "第 6499 行"
    assert log.locator(".line").first.inner_text() == "第 1500 行"
    assert log.locator(".earlier").inner_text() == "更早的行已省略…"
    with page.expect_download() as download:
        page.get_by_role("link", name="下载完整日志").click()
    whole = Path(download.value.path()).read_text()
    assert whole.splitlines() == [f"第 {i} 行" for i in range(6500)]
    assert world.csp_errors == []


def test_search_box_filters_the_table_in_place_with_htmx(world: World) -> None:
    page = world.page("en-US")
    page.goto(world.web.base + "/")
    assert page.locator("tbody tr").count() == 5
    page.evaluate("document.body.dataset.marker = 'same-page'")
    page.fill("#q", "维护")
    wait_for(lambda: page.locator("tbody tr").count() == 3, 10)
    assert page.locator("tbody tr").count() == 3  # chore-0..2, by their label
    assert page.evaluate("document.body.dataset.marker") == "same-page"  # no reload
    assert "q=" in page.url  # pushed: the filtered list has its own address
    assert world.csp_errors == []


def test_a_post_without_csrf_is_refused_in_the_browser_session(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    before = len(world.ql3.json("local", "runs"))
    reply = page.request.post(world.web.base + "/tasks/chore-0/run",
                              headers={"Origin": world.web.base}, form={"x": "1"})
    assert reply.status == 403
    assert len(world.ql3.json("local", "runs")) == before


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_pages_pass_axe_and_are_screenshot_at_desktop_and_375px(
        world: World, locale: str) -> None:
    lang = "zh-CN" if locale == "zh-CN" else "en"
    for label, viewport in (("desktop", DESKTOP), ("375px", PHONE)):
        page = world.page(locale, viewport)
        page.goto(world.web.base + "/")
        assert page.locator("html").get_attribute("lang") == lang
        assert ("定时规则" if lang == "zh-CN" else "Schedule") in page.content()
        assert _axe_serious(page) == []
        if viewport is PHONE:  # the table collapses to one card per task
            display = page.eval_on_selector("table.cards tr", "e => getComputedStyle(e).display")
            assert display == "block"
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"]
        _shot(page, f"tasks-{lang}-{label}")
        page.get_by_role("link", name="成功" if lang == "zh-CN" else "succeeded").first.click()
        page.wait_for_url("**/runs/*")
        page.locator("#log[data-done='true']").wait_for(timeout=20_000)
        assert _axe_serious(page) == []
        _shot(page, f"run-{lang}-{label}")
        page.context.close()
    assert world.csp_errors == []


def test_a_burst_of_40000_lines_ends_with_the_newest_5000_in_order(world: World) -> None:
    # one stream message can carry tens of thousands of lines: the viewer spreads them over
    # animation frames and makes elements only of the newest 5,000; what the page shows in
    # the end must be exactly those, in order, with the end marker after the last one
    world.ql3.run("local", "task", "add", "burst-lines", "--schedule", "0 5 * * *", "--",
                  "seq", "-f", "第 %.0f 行", "0", "39999")
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.locator("tr", has_text="burst-lines").get_by_role(
        "button", name="运行 burst-lines").click()
    page.wait_for_url("**/runs/*")
    page.locator("#log[data-done='true']").wait_for(timeout=60_000)
    log = page.locator("#log")
    texts = log.locator(".line").all_inner_texts()
    assert texts == [f"第 {i} 行" for i in range(35_000, 40_000)]
    assert log.locator(".earlier").inner_text() == "更早的行已省略…"
    order = log.evaluate("b => [...b.children].map(e => e.className)")
    assert order[0] == "earlier" and order[-1] == "ended" and order.count("ended") == 1
    assert page.locator("#run-status").inner_text() == "成功"
    assert world.csp_errors == []


def test_the_open_log_follows_a_retry_and_the_earlier_attempt_stays_readable(
        world: World, tmp_path: Path) -> None:
    """docs/panel.md "Run detail": attempt 1 of `签到重试` prints a line and fails once the
    page shows it; the page, never reloaded, shows the divider naming attempt 2 and attempt
    2's line (shorter than attempt 1's, so an offset carried over would hide it), then the
    end; attempt 1's log stays one link away, in zh-CN and in English at 375 px."""
    go, mark = tmp_path / "go", tmp_path / "mark"
    world.ql3.run("local", "task", "add", "签到重试", "--schedule", "0 5 * * *",
                  "--max-attempts", "2", "--", "sh", "-c",
                  f"if [ -e '{mark}' ]; then echo 重试成功; exit 0; fi; touch '{mark}'; "
                  "echo 第一次尝试失败了，稍后重试; i=0; "
                  f"while [ ! -e '{go}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
                  "exit 3")
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.locator("tr", has_text="签到重试").get_by_role("button", name="运行 签到重试").click()
    page.wait_for_url("**/runs/*")
    log = page.locator("#log")
    log.get_by_text("第一次尝试失败了，稍后重试").wait_for(timeout=20_000)
    page.evaluate("window.__samePage = 1")  # gone if the page were loaded again
    go.touch()  # attempt 1 fails now, with the page open on it
    log.locator(".line.attempt", has_text="第 2 次尝试").wait_for(timeout=30_000)
    log.get_by_text("重试成功").wait_for(timeout=20_000)
    wait_for(lambda: log.get_attribute("data-done") == "true", 20)
    assert page.evaluate("window.__samePage") == 1
    lines = [t.strip() for t in log.locator(".line").all_inner_texts()]
    assert lines == ["第一次尝试失败了，稍后重试", "── 第 2 次尝试 ──", "重试成功"]
    assert page.locator("#run-status").inner_text() == "成功"
    nav = page.locator("#run-attempts")
    assert nav.get_by_role("link", name="第 2 次尝试").count() == 1  # added live
    nav.get_by_role("link", name="第 1 次尝试").click()
    page.wait_for_url("**attempt=1")
    page.locator("#log[data-done='true']").wait_for(timeout=20_000)
    earlier = page.locator("#log")
    assert [t.strip() for t in earlier.locator(".line").all_inner_texts()] == [
        "第一次尝试失败了，稍后重试"]
    assert "第 1 次尝试的日志到此结束" in earlier.inner_text()
    assert world.csp_errors == []
    english = world.page("en", PHONE)
    english.goto(page.url)
    english.locator("#log[data-done='true']").wait_for(timeout=20_000)
    assert english.locator("h2", has_text="Log of attempt 1").count() == 1
    assert "end of attempt 1's log" in english.locator("#log").inner_text()
    assert english.evaluate("document.documentElement.scrollWidth") <= 375
    with english.expect_download() as download:
        english.get_by_role("link", name="Download the whole log").click()
    assert Path(download.value.path()).read_text() == "第一次尝试失败了，稍后重试\n"
