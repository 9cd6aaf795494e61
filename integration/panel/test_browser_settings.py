"""The local profile's Settings page in a real browser (docs/panel.md "Pages"): Debian's
chromium-headless-shell through playwright, against a real `ql3 local serve` and
`ql3 local web` (panel_harness). Screenshots (desktop and 375 px, zh-CN and English) go to
``$QL3_ARTIFACTS_DIR/panel``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_browser import DESKTOP, PHONE, World, _axe_serious, _shot, signed_in_world

from harness import Ql3

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")

SECRET_ARG = "秘密参数-s3cr3t"
HOOK_KEY = "HOOKKEY-9f8e7d"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-settings") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    notified = data.parent / "notified.txt"
    ql3.run("local", "settings", "set", "notify_command",
            f"sh -c 'echo \"$QL3_TASK\" >> {notified}' {SECRET_ARG}")
    ql3.run("local", "settings", "set", "notify_webhook", f"http://127.0.0.1:9/h/{HOOK_KEY}")
    ql3.run("local", "settings", "set", "notify_timeout_s", "2")
    with signed_in_world(ql3, chromium) as world:
        yield world


def test_local_settings_show_the_owner_and_channels_and_the_test_uses_them(
        world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.get_by_role("link", name="设置").click()
    page.wait_for_url(world.web.base + "/settings")
    facts = page.locator("#settings-profile").inner_text()
    assert "standalone" in facts and str(world.ql3.data_dir) in facts
    pid = world.ql3.json("local", "status")["owner"]["pid"]
    assert f"进程号 {pid}" in page.locator("#settings-owner").inner_text()
    assert "启动于" in page.locator("#settings-owner").inner_text()
    assert page.locator("#settings-recovery").inner_text() == "没有需要恢复的运行。"
    channels = page.locator("#settings-notify").inner_text()
    assert "http://127.0.0.1:9/…" in channels and "sh …" in channels
    assert SECRET_ARG not in page.content() and HOOK_KEY not in page.content()
    assert _axe_serious(page) == []
    _shot(page, "settings-local-zh-CN-desktop")
    page.get_by_role("button", name="发送测试通知").click()
    page.wait_for_url(world.web.base + "/settings/notify/test")
    sent = page.locator("#settings-deliveries").inner_text()
    assert "command: 已送达" in sent and "webhook: 失败" in sent
    notified = world.ql3.data_dir.parent / "notified.txt"
    assert notified.read_text(encoding="utf-8").splitlines() == ["ql3-notify-test"]
    assert world.csp_errors == [], world.csp_errors[0][:400]
    page.context.close()


def test_local_settings_switch_the_language_and_fit_a_phone(world: World) -> None:
    page = world.page("zh-CN", viewport=PHONE)
    page.goto(world.web.base + "/settings")
    page.get_by_label("语言", exact=True).select_option("en")
    page.get_by_role("button", name="应用").click()
    page.wait_for_url(world.web.base + "/settings")
    assert page.locator("h1").inner_text() == "Settings"
    assert page.locator("html").get_attribute("lang") == "en"
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    _shot(page, "settings-local-en-phone")
    page.set_viewport_size(DESKTOP)
    _shot(page, "settings-local-en-desktop")
    page.context.close()


def test_local_profile_has_no_token_pages(world: World) -> None:
    page = world.page("en")
    page.goto(world.web.base + "/settings")
    assert page.locator("#settings-tokens, #settings-signins").count() == 0
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    reply = page.request.post(world.web.base + "/settings/tokens",
                              headers={"Origin": world.web.base},
                              form={"csrf": str(csrf), "name": "x", "scope": "admin"})
    assert reply.status == 501
    page.context.close()


