"""The run page's status and facts (docs/panel.md "Run detail"), in a real browser against
a real `ql3 local serve` and `ql3 local web`: the title is the run's ``NAME#N``; the status
and each attempt's facts (status, exit code or signal, start, end, duration) change while
the page stays open, from running to the final status. Screenshots go to
``$QL3_ARTIFACTS_DIR/panel``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_browser import PHONE, World, _axe_serious, _shot, signed_in_world

from harness import Ql3, wait_for

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-run-facts") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    with signed_in_world(ql3, chromium) as world:
        yield world


def test_status_and_attempt_facts_update_live_from_running_to_failed(
        world: World, tmp_path: Path) -> None:
    """The task prints a line, then waits for a file the test makes only after the page
    showed 运行中 (no reload: a marker set in the page survives), then fails with exit
    code 3; the page then shows 失败 and the attempt's exit code, end and duration."""
    go = tmp_path / "go"
    world.ql3.run("local", "task", "add", "京东签到", "--schedule", "0 8 * * *", "--",
                  "sh", "-c", "echo 签到开始; i=0; "
                  f"while [ ! -e '{go}' ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; "
                  "echo 签到失败; exit 3")
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.locator("tr", has_text="京东签到").get_by_role("button", name="运行 京东签到").click()
    page.wait_for_url("**/runs/*")
    page.evaluate("window.__samePage = 1")
    assert page.locator("h1").inner_text() == "京东签到#1"
    assert page.title().startswith("京东签到#1")
    page.locator("#log").get_by_text("签到开始").wait_for(timeout=20_000)
    status = page.locator("#run-status")
    wait_for(lambda: status.inner_text() == "运行中", 20)  # live, while the log streams
    attempt = page.locator(".run-attempt[data-attempt='1']")
    wait_for(lambda: attempt.locator("[data-fact='status']").inner_text() == "运行中", 20)
    assert attempt.locator("[data-fact='started'] time").count() == 1  # started, shown
    assert attempt.locator("[data-fact='exit']").inner_text() == "—"
    go.touch()
    page.locator("#log[data-done='true']").wait_for(timeout=30_000)
    assert page.evaluate("window.__samePage") == 1
    assert status.inner_text() == "失败"
    assert attempt.locator("[data-fact='status']").inner_text() == "失败"
    assert attempt.locator("[data-fact='exit']").inner_text() == "3"  # as the CLI says
    assert attempt.locator("[data-fact='finished'] time").count() == 1
    assert attempt.locator("[data-fact='duration']").inner_text().endswith("秒")
    assert page.locator("#run-stop").count() == 0
    shown = world.ql3.json("local", "inspect", "京东签到#1")
    assert shown["attempts"][0]["exit_code"] == 3
    assert world.csp_errors == [], world.csp_errors[0][:400]
    _shot(page, "run-facts-zh-CN-desktop")
    phone = world.page("zh-CN", PHONE)
    phone.goto(page.url)  # a reload shows the same facts, and fits a phone
    assert phone.locator("#run-status").inner_text() == "失败"
    assert phone.locator(".run-attempt [data-fact='exit']").inner_text() == "3"
    assert phone.evaluate("document.documentElement.scrollWidth") <= 375
    assert _axe_serious(phone) == []
    _shot(phone, "run-facts-zh-CN-375")
    english = world.page("en", PHONE)
    english.goto(page.url)
    facts = english.locator(".run-attempt").inner_text()
    assert "Exit code / signal" in facts and "Duration" in facts
    assert english.evaluate("document.documentElement.scrollWidth") <= 375
