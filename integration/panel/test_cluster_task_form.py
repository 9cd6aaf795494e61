"""The cluster's task form at ``/ui`` in a real browser (docs/panel.md "Cluster"): chromium
against a real ``ql3 control serve``, a real ``ql3 worker run``, PostgreSQL and moto.

An admin creates ``京东签到`` through the form with a bundle's Chinese echo entry point (a
bad cron first: an inline zh-CN message, nothing else typed lost), sees the next fire times
in the task's zone and the browser's, edits its schedule to one with seconds (the secret
kept, shown only as "已设置"), copies it, runs it and reads its log. An operator and a
viewer see no form controls and their forged POSTs get 403. The form fits 375 px.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from test_browser import _axe_serious
from test_cluster_browser import (  # its imports set up integration/cluster and s3
    DESKTOP,
    Ahead,
    ClusterDb,
    Reaper,
    World,
    _shot,
    close_contexts,
    cluster_world,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
sync_api = pytest.importorskip("playwright.sync_api")

JD = "京东签到"
COPY = "京东签到-副本"
ENTRY = "签到.sh"
VIEWER_ZONE = "Europe/Berlin"
PHONE = {"width": 375, "height": 800}
QL3 = str(Path(sys.executable).parent / "ql3")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, moto_session: str,
          cluster_dbs: Ahead[ClusterDb], pg_reaper: Reaper, chromium: Any) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("panel-cform")
    with cluster_world(tmp, moto_session, cluster_dbs.take(), reaper=pg_reaper) as cluster:
        admin = cluster.token("admin")
        labels = "zone=a,platform=jd"
        worker_token = cluster.token("worker", pool="default", labels=labels)
        control = cluster.start_control("c1", lease_ms=30_000, heartbeat_ms=2_000)
        url = str(control.url)
        cluster.start_worker("w1", worker_token, url, concurrency=2, labels=labels)
        tree = tmp / "jd"
        tree.mkdir()
        entry = tree / ENTRY
        entry.write_text('#!/bin/sh\necho "京东签到 开始 $JD_NAME"\n'
                         'echo "密钥长度 ${#JD_COOKIE}"\necho "京东签到 完成"\n')
        entry.chmod(0o755)
        pushed = subprocess.run(
            [QL3, "cluster", "script", "push", str(tree), "--json"], check=True,
            env=cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=admin), text=True,
            capture_output=True, timeout=90)
        json.loads(pushed.stdout)  # the bundle is known to control now
        api = cluster.api(url, admin)
        try:
            yield World(cluster, url + "/ui", api, chromium)
        finally:
            close_contexts(chromium)
            api.close()


def _page(world: World, token: str, locale: str = "zh-CN",
          viewport: dict[str, int] = DESKTOP) -> Any:
    context = world.browser.new_context(locale=locale, viewport=viewport,
                                        timezone_id=VIEWER_ZONE)
    page = context.new_page()
    page.goto(world.base + "/")
    page.fill("#token", token)
    page.get_by_role("button", name="登录" if locale == "zh-CN" else "Sign in").click()
    page.wait_for_url(world.base + "/")
    return page


def _task(world: World, name: str) -> dict[str, Any]:
    answer = world.api.get(f"/v1/tasks/{quote(name)}")
    assert answer.status_code == 200, answer.text
    task: dict[str, Any] = answer.json()
    return task


def _fits(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def test_admin_creates_edits_copies_and_runs_a_chinese_task_through_the_form(
        world: World) -> None:
    page = _page(world, world.cluster.token("admin", name="管理员-admin"))
    page.locator("#new-task").click()
    page.wait_for_url(world.base + "/tasks/new")
    # as you type: the next 5 fire times in the task's zone and in the browser's
    page.fill("#schedule", "0 8 * * *")
    page.fill("#timezone", "Asia/Shanghai")
    page.locator("#preview-viewer").wait_for()
    preview = page.locator("#preview")
    assert VIEWER_ZONE in preview.inner_text()
    assert preview.locator("time").count() == 10
    assert "08:00:00" in preview.locator("ol").first.inner_text()
    assert "08:00:00" not in preview.locator("ol").nth(1).inner_text()
    # everything typed, with a bad cron: an inline zh-CN message, nothing else lost
    page.fill("#name", JD)
    page.fill("#schedule", "0 61 * * *")
    page.locator("#entry").select_option(label=ENTRY)
    page.fill("#timeout", "60")
    page.fill("#attempts", "2")
    page.fill("#backoff", "5")
    page.locator("#concurrency").select_option("allow")
    page.fill("#labels", "platform=jd")
    page.fill("#env", "JD_NAME=京东")
    page.fill("#secret_new", "JD_COOKIE=pt_key=abc123")
    page.get_by_role("button", name="保存").click()
    error = page.locator("#schedule-error")
    error.wait_for()
    assert "“时”一段无效" in error.inner_text()
    assert page.locator("#schedule").get_attribute("aria-invalid") == "true"
    assert page.input_value("#name") == JD and page.input_value("#schedule") == "0 61 * * *"
    assert page.input_value("#timeout") == "60" and page.input_value("#attempts") == "2"
    assert page.input_value("#backoff") == "5" and page.input_value("#labels") == "platform=jd"
    assert page.input_value("#env") == "JD_NAME=京东"
    assert page.input_value("#concurrency") == "allow"
    assert page.input_value("#entry").endswith("|" + ENTRY)
    assert "pt_key=abc123" not in page.content()  # write-only: never echoed, so
    assert "请重新输入" in page.locator("#secrets-error").inner_text()  # the page says so
    assert world.api.get(f"/v1/tasks/{quote(JD)}").status_code == 404
    assert _axe_serious(page) == []
    _shot(page, "cluster-form-error-zh-CN")
    page.fill("#schedule", "0 8 * * *")
    page.fill("#secret_new", "JD_COOKIE=pt_key=abc123")
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/ui/?q=*")
    assert page.locator("tr", has_text=JD).count() == 1
    task = _task(world, JD)
    assert task["entry_point"] == ENTRY and task["bundle_digest"]
    assert (task["timeout_s"], task["max_attempts"], task["retry_backoff_ms"],
            task["concurrency_policy"]) == (60, 2, 5000, "allow")
    assert task["labels"] == {"platform": "jd"} and task["timezone"] == "Asia/Shanghai"
    assert task["env"] == {"JD_NAME": {"value": "京东", "secret": False},
                           "JD_COOKIE": {"value": None, "secret": True}}

    # edit its schedule (seconds first): the secret shows as set and is kept
    page.get_by_role("link", name=f"编辑 {JD}").click()
    page.wait_for_url("**/edit")
    secrets = page.locator("#secrets")
    assert "JD_COOKIE" in secrets.inner_text() and "已设置" in secrets.inner_text()
    assert "abc123" not in page.content()
    assert _axe_serious(page) == []
    page.fill("#schedule", "30 0 9 * * *")
    page.locator("#preview", has_text="09:00:30").wait_for()
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/ui/?q=*")
    task = _task(world, JD)
    assert task["schedule"] == "30 0 9 * * *"
    assert task["env"]["JD_COOKIE"] == {"value": None, "secret": True}

    # copy: everything but the name and the secret
    page.goto(world.base + "/")
    page.get_by_role("link", name=f"复制 {JD}").click()
    page.wait_for_url("**/tasks/new?copy=*")
    assert page.input_value("#name") == ""
    assert page.input_value("#schedule") == "30 0 9 * * *"
    assert "JD_COOKIE" not in page.locator("#secrets").inner_text()
    page.fill("#name", COPY)
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/ui/?q=*")
    copy = _task(world, COPY)
    assert (copy["schedule"], copy["entry_point"], copy["labels"]) == (
        "30 0 9 * * *", ENTRY, {"platform": "jd"})
    assert copy["env"] == {"JD_NAME": {"value": "京东", "secret": False}}

    # run it and read its log: the kept secret reached the run (its length, not its value)
    page.goto(world.base + "/?q=" + quote(JD))
    page.locator("tr", has_text=JD).first.get_by_role("button", name=f"运行 {JD}").click()
    page.wait_for_url("**/ui/runs/*")
    log = page.locator("#log")
    log.get_by_text("京东签到 开始 京东").wait_for(timeout=60_000)
    log.get_by_text("京东签到 完成").wait_for(timeout=60_000)
    assert "密钥长度 13" in log.inner_text()
    wait_for(lambda: log.get_attribute("data-done") == "true", 60)
    assert page.locator("#run-status").inner_text() == "成功"
    page.context.close()


def test_the_form_fits_a_phone_in_both_languages(world: World) -> None:
    token = world.cluster.token("admin")
    for locale in ("zh-CN", "en-US"):
        page = _page(world, token, locale=locale, viewport=PHONE)
        page.goto(world.base + "/tasks/new")
        page.locator("#preview-viewer").wait_for()
        assert _fits(page), locale
        assert _axe_serious(page) == [], locale
        _shot(page, f"cluster-form-375-{locale}")
        page.context.close()


def test_an_english_session_reads_the_apis_refusals_in_english(world: World) -> None:
    page = _page(world, world.cluster.token("admin"), locale="en-US")
    page.goto(world.base + "/tasks/new")
    page.fill("#name", "淘宝/签到")
    page.fill("#timezone", "Asia/Shanghia")
    page.fill("#command", "echo 淘宝")
    page.fill("#attempts", "101")
    page.get_by_role("button", name="Save").click()
    page.locator("#attempts-error").wait_for()
    assert page.locator("#name-error").inner_text().startswith("Use 1-128 characters")
    assert page.locator("#attempts-error").inner_text() == "Must be at most 100."
    assert page.input_value("#command") == "echo 淘宝"
    page.fill("#name", "淘宝签到")
    page.fill("#attempts", "1")
    page.get_by_role("button", name="Save").click()
    page.locator("#timezone-error").wait_for()
    assert "did you mean Asia/Shanghai?" in page.locator("#timezone-error").inner_text()
    assert world.api.get(f"/v1/tasks/{quote('淘宝签到')}").status_code == 404
    page.context.close()


@pytest.mark.parametrize("scope", ["viewer", "operator"])
def test_no_form_without_the_admin_scope_and_a_forged_post_is_403(
        world: World, scope: str) -> None:
    page = _page(world, world.cluster.token(scope), locale="en-US")
    assert page.locator("#new-task").count() == 0
    assert page.locator("a[href*='/edit'], a[href*='?copy='], a[href$='/delete']").count() == 0
    assert page.goto(world.base + "/tasks/new").status == 403
    page.goto(world.base + "/")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    origin = world.base.rsplit("/ui", 1)[0]
    forged = page.request.post(world.base + "/tasks/new", headers={"Origin": origin},
                               form={"csrf": str(csrf), "name": f"伪造-{scope}",
                                     "schedule": "@daily", "timezone": "UTC",
                                     "command": "echo 伪造"})
    assert forged.status == 403
    assert world.api.get(f"/v1/tasks/{quote('伪造-' + scope)}").status_code == 404
    page.context.close()
