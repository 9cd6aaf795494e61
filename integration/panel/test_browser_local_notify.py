"""The local Settings page's notification form in a real browser (docs/panel.md "Pages",
Settings): statuses, timeout and the write-only channel URLs and webhook saved through the
owner's ``settings_set``, refusals worded from the catalogs, and the stored URLs never in
the page. Against a real `ql3 local serve` and `ql3 local web`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_browser import PHONE, World, _axe_serious, _shot, signed_in_world

from harness import Ql3

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")

URL_KEY = "推送密钥-7a6b5c"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-local-notify") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    with signed_in_world(ql3, chromium) as world:
        yield world


def _settings(ql3: Ql3) -> dict[str, str | None]:
    return {row["key"]: row["value"] for row in ql3.json("local", "settings", "show")}


def test_save_channels_statuses_and_timeout_from_the_settings_page(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/settings")
    form = page.locator("#notify-form")
    form.locator("input[name=notify_on][value=succeeded]").check()
    page.get_by_label("每个渠道最多等待的秒数（1-25）").fill("5")
    page.get_by_label("替换推送渠道 URL（Apprise）").fill(
        f"json://127.0.0.1:9/{URL_KEY}\nbark://127.0.0.1:9/{URL_KEY}")
    page.get_by_label("替换 Webhook URL").fill(f"http://127.0.0.1:9/h/{URL_KEY}")
    page.get_by_role("button", name="保存通知设置").click()
    page.wait_for_url("**/settings?saved=1")
    assert page.locator("#settings-saved").inner_text() == "通知设置已保存。"
    stored = _settings(world.ql3)
    assert stored["notify_on"] == "failed,timed_out,lost,succeeded"
    assert stored["notify_timeout_s"] == "5"
    assert stored["notify_webhook"] == "http://127.0.0.1:9/…"
    assert "json://127.0.0.1" in str(stored["notify_urls"])
    channels = page.locator("#settings-notify").inner_text()
    assert "json://127.0.0.1" in channels and "bark://127.0.0.1" in channels
    assert URL_KEY not in page.content()  # write-only: never back in the page
    assert page.get_by_label("替换推送渠道 URL（Apprise）").input_value() == ""
    # saving again with the URL fields empty keeps them
    page.get_by_role("button", name="保存通知设置").click()
    page.wait_for_url("**/settings?saved=1")
    assert _settings(world.ql3)["notify_urls"] == stored["notify_urls"]
    page.get_by_label("删除 Webhook").check()
    page.get_by_role("button", name="保存通知设置").click()
    page.wait_for_url("**/settings?saved=1")
    assert _settings(world.ql3)["notify_webhook"] is None


@pytest.mark.parametrize(("locale", "says"), [
    ("zh-CN", ("请至少选择一种状态。", "请使用 http:// 或 https:// URL。")),
    ("en-US", ("Choose at least one status.", "Use an http:// or https:// URL.")),
])
def test_a_refused_setting_is_worded_in_the_viewers_language(
        world: World, locale: str, says: tuple[str, str]) -> None:
    before = _settings(world.ql3)
    page = world.page(locale, PHONE)
    page.goto(world.web.base + "/settings")
    for box in page.locator("input[name=notify_on]").all():
        box.uncheck()
    page.locator("#notify-save").click()
    assert page.locator("#lset-error").inner_text() == says[0]
    assert page.locator("#notify-form fieldset").get_attribute("aria-invalid") == "true"
    for box in page.locator("input[name=notify_on]").all():  # the stored ones, shown again
        box.uncheck()
    page.locator("input[name=notify_on][value=failed]").check()
    page.locator("#lset-webhook").fill("ftp://127.0.0.1/x")
    page.locator("#notify-save").click()
    assert page.locator("#lset-error").inner_text() == says[1]
    assert page.locator("#lset-webhook").get_attribute("aria-invalid") == "true"
    assert _axe_serious(page) == []
    _shot(page, f"settings-notify-error-{locale}-phone")
    after = _settings(world.ql3)
    assert after["notify_webhook"] == before["notify_webhook"]
    assert after["notify_on"] == "failed"  # saved before the webhook was refused
