"""The cluster's panel at ``/ui`` in a real browser (docs/panel.md "Cluster"): Debian's
chromium-headless-shell driven by Python playwright, against a real ``ql3 control serve``,
a real ``ql3 worker run``, PostgreSQL and moto's S3 server (``integration/cluster``'s
``cluster_kit``). One control replica, one worker and one browser for the module.

Screenshots go to ``$QL3_ARTIFACTS_DIR/panel`` (default ``./test-artifacts/panel``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
for _dir in (ROOT / "integration" / "cluster", ROOT / "integration" / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

CHROMIUM = shutil.which("chromium-headless-shell") or "/usr/bin/chromium-headless-shell"
ARTIFACTS = Path(os.environ.get("QL3_ARTIFACTS_DIR", ROOT / "test-artifacts")) / "panel"
DESKTOP = {"width": 1280, "height": 800}
JD = "京东签到"
LONG = "长任务"

if not Path(CHROMIUM).exists():  # scripts/test.sh installs it
    pytest.skip("chromium-headless-shell is not installed (apt-get install "
                "chromium-headless-shell fonts-wqy-microhei)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("moto")
pytest.importorskip("psycopg")

from cluster_kit import Cluster, ClusterDb, wait_for  # noqa: E402
from s3_services import CREDS, moto_server, new_bucket  # noqa: E402

from qinglong.control.retention.objects import make_client  # noqa: E402


@dataclass
class World:
    cluster: Cluster
    base: str  # the panel: http://127.0.0.1:PORT/ui
    api: Any  # an admin API client
    browser: Any

    def page(self, locale: str = "zh-CN") -> Any:
        context = self.browser.new_context(locale=locale, viewport=DESKTOP)
        return context.new_page()

    def sign_in(self, token: str, locale: str = "zh-CN") -> Any:
        page = self.page(locale)
        page.goto(self.base + "/")
        page.fill("#token", token)
        page.get_by_role("button", name="登录" if locale == "zh-CN" else "Sign in").click()
        page.wait_for_url(self.base + "/")
        return page

    def runs_of(self, task: str) -> list[dict[str, Any]]:
        answer = self.api.get("/v1/runs", params={"task": task})
        assert answer.status_code == 200, answer.text
        items: list[dict[str, Any]] = answer.json()["items"]
        return items


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("panel-cluster")
    with moto_server() as moto:
        db = ClusterDb.create()
        bucket = new_bucket(make_client(moto, timeout_s=5, **CREDS), versioned=True)
        cluster = Cluster(tmp, db, moto, bucket)
        try:
            admin = cluster.token("admin")
            # a task's labels select the workers that may run it (docs/protocols.md §4.2)
            labels = "zone=a,platform=jd"
            worker_token = cluster.token("worker", pool="default", labels=labels)
            control = cluster.start_control("c1", lease_ms=30_000, heartbeat_ms=2_000)
            url = str(control.url)
            cluster.start_worker("w1", worker_token, url, concurrency=2, labels=labels)
            api = cluster.api(url, admin)
            for name, shell, labels in (
                    (JD, f"echo {JD} 开始; sleep 4; echo {JD} 完成", {"platform": "jd"}),
                    (LONG, f"echo {LONG} 开始; exec sleep 300", {"zone": "a"})):
                answer = api.post("/v1/tasks", json={
                    "name": name, "shell": shell, "labels": labels,
                    "schedule": "0 8 * * *", "timezone": "Asia/Shanghai"})
                assert answer.status_code == 201, answer.text
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM)
                try:
                    yield World(cluster, url + "/ui", api, browser)
                finally:
                    browser.close()
                    api.close()
        finally:
            cluster.close()
            db.drop()


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_operator_signs_in_runs_a_chinese_task_and_watches_its_log_live(
        world: World) -> None:
    page = world.page()
    page.goto(world.base + "/")
    assert page.locator("#token").count() == 1  # signed out: the token form
    _shot(page, "cluster-signin-zh-CN")
    page.fill("#token", world.cluster.token("operator", name="运维-operator"))
    page.get_by_role("button", name="登录").click()
    page.wait_for_url(world.base + "/")
    row = page.locator("tr", has_text=JD)
    assert "platform=jd" in row.inner_text() and "Asia/Shanghai" in row.inner_text()
    _shot(page, "cluster-tasks-zh-CN")
    row.get_by_role("button", name=f"运行 {JD}").click()
    page.wait_for_url("**/ui/runs/*")
    log = page.locator("#log")
    log.get_by_text(f"{JD} 开始").wait_for(timeout=60_000)
    assert log.get_attribute("data-done") is None  # seen while the run still runs
    log.get_by_text(f"{JD} 完成").wait_for(timeout=60_000)
    wait_for(lambda: log.get_attribute("data-done") == "true", 60)
    assert page.locator("#run-status").inner_text() == "成功"
    assert page.locator("#run-stop").count() == 0  # nothing left to stop
    _shot(page, "cluster-run-zh-CN")
    page.context.close()


def test_operator_stops_a_long_run_from_its_page(world: World) -> None:
    page = world.sign_in(world.cluster.token("operator"))
    page.locator("tr", has_text=LONG).get_by_role("button", name=f"运行 {LONG}").click()
    page.wait_for_url("**/ui/runs/*")
    run_id = page.url.rsplit("/", 1)[1]
    page.locator("#log").get_by_text(f"{LONG} 开始").wait_for(timeout=60_000)
    page.get_by_role("button", name="停止").click()
    page.wait_for_url(f"**/ui/runs/{run_id}")
    page.locator("#log[data-done='true']").wait_for(timeout=60_000)
    assert page.locator("#run-status").inner_text() == "已取消"
    assert [r["status"] for r in world.runs_of(LONG) if r["id"] == run_id] == ["cancelled"]
    page.context.close()


def test_viewer_sees_no_write_controls_and_a_forged_post_is_403(world: World) -> None:
    page = world.sign_in(world.cluster.token("viewer"), locale="en-US")
    assert page.locator("tr", has_text=JD).count() == 1
    assert page.get_by_role("button", name=f"Run {JD}").count() == 0
    assert page.locator("form[action$='/run'], form[action*='/disable']").count() == 0
    _shot(page, "cluster-tasks-viewer-en")
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    before = len(world.runs_of(JD))
    reply = page.request.post(world.base + "/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/run",
                              headers={"Origin": world.base.rsplit("/ui", 1)[0]},
                              form={"csrf": str(csrf)})
    assert reply.status == 403
    assert len(world.runs_of(JD)) == before
    page.context.close()


def test_a_post_without_csrf_is_refused(world: World) -> None:
    page = world.sign_in(world.cluster.token("operator"))
    before = len(world.runs_of(JD))
    reply = page.request.post(world.base + "/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/run",
                              headers={"Origin": world.base.rsplit("/ui", 1)[0]},
                              form={"x": "1"})
    assert reply.status == 403
    assert len(world.runs_of(JD)) == before
    page.context.close()


def test_revoking_the_token_ends_the_session_and_sign_out_ends_another(
        world: World) -> None:
    token = world.cluster.token("operator", name="revoke-me")
    page = world.sign_in(token)
    other = world.sign_in(token)  # a second browser of the same user
    other.get_by_role("button", name="退出登录").click()
    other.wait_for_url(world.base + "/signin")
    other.goto(world.base + "/")
    assert other.locator("#token").count() == 1  # signed out
    page.reload()
    assert page.locator("tr", has_text=JD).count() == 1  # the other session lives on
    with world.cluster.db.connect() as conn:
        row = conn.execute("SELECT id::text FROM api_tokens WHERE name = 'revoke-me'"
                           ).fetchone()
    assert row is not None
    world.cluster.ql3("control", "token", "revoke", "--database-url",
                      world.cluster.db.owner_url, row[0])
    response = page.goto(world.base + "/")
    assert response is not None and response.status == 401
    assert page.locator("#token").count() == 1
    page.context.close()
    other.context.close()


def test_operator_finds_runs_overview_and_variables_in_the_header(world: World) -> None:
    answer = world.api.post(f"/v1/tasks/{JD}/run")  # 409 when one is in progress already
    assert answer.status_code in (201, 409), answer.text
    newest = world.runs_of(JD)[0]["id"]
    page = world.sign_in(world.cluster.token("operator"))
    page.get_by_role("link", name="运行记录").click()
    page.wait_for_url(world.base + "/runs")
    assert page.locator(f"a[href$='/runs/{newest}']").count() == 1
    assert JD in page.locator("table").inner_text()
    _shot(page, "cluster-runs-zh-CN")
    page.get_by_role("link", name="概览").click()
    page.wait_for_url(world.base + "/dashboard")
    assert JD in page.locator("ol").inner_text()  # its next run at 08:00 Asia/Shanghai
    page.get_by_role("link", name="环境变量").click()
    page.wait_for_url(world.base + "/vars")
    page.fill("#var-name", "JD_COOKIE")
    page.fill("#var-value", "pt_key=京东秘密")
    page.fill("#var-remark", "京东账号")
    page.locator("input[name=secret]").first.check()
    page.get_by_role("button", name="保存").click()
    page.wait_for_url(world.base + "/vars")
    row = page.locator("tr", has_text="JD_COOKIE")
    assert "京东账号" in row.inner_text() and "********" in row.inner_text()
    assert "京东秘密" not in page.content()
    _shot(page, "cluster-vars-zh-CN")
    page.context.close()


TB = "淘宝签到"  # labels no live worker has: its runs wait, so its slots are skipped


def test_viewer_reads_occurrences_and_workers_with_the_no_worker_warning(
        world: World) -> None:
    """A task whose labels no live worker holds: the Tasks page warns on its row (not on
    the others), the Workers page lists the pool, the live worker (labels, concurrency,
    last heartbeat relative and in the viewer's zone) and the task; its Occurrences show
    the slot that queued a run (linked) and the slots skipped while that run waited."""
    answer = world.api.post("/v1/tasks", json={
        "name": TB, "shell": "echo 淘宝", "labels": {"platform": "tb"},
        "schedule": "* * * * * *", "timezone": "Asia/Shanghai",
        "concurrency_policy": "forbid"})
    assert answer.status_code == 201, answer.text
    try:
        context = world.browser.new_context(locale="zh-CN", viewport=DESKTOP,
                                            timezone_id="America/New_York")
        page = context.new_page()
        page.goto(world.base + "/")
        page.fill("#token", world.cluster.token("viewer", name="值班-viewer"))
        page.get_by_role("button", name="登录").click()
        page.wait_for_url(world.base + "/")
        page.goto(world.base + "/?q=签到")
        assert "没有匹配标签的在线节点" in page.locator("tr", has_text=TB).inner_text()
        assert "没有匹配标签的在线节点" not in page.locator("tr", has_text=JD).inner_text()
        assert "本页有 1 个任务" in page.locator("#no-worker-note").inner_text()
        page.get_by_role("link", name="执行节点").first.click()
        page.wait_for_url(world.base + "/workers")
        assert "default" in page.locator("#pools").inner_text()
        row = page.locator("#workers tr", has_text="w1")
        text = row.inner_text()
        assert "platform=jd" in text and "zone=a" in text and "/ 2" in text
        assert "在线" in text and "秒前" in text
        # the last heartbeat in the viewer's zone (New York, -05:00 in December)
        shown = row.locator("time").inner_text()
        assert shown.endswith("-05:00"), shown
        assert row.locator("time").get_attribute("title") == "America/New_York"
        unmatched = page.locator("#unmatched").inner_text()
        assert TB in unmatched and "platform=tb" in unmatched and JD not in unmatched
        _shot(page, "cluster-workers-zh-CN")
        page.goto(world.base + "/?q=" + TB)
        page.get_by_role("link", name=f"调度记录 {TB}").click()
        page.wait_for_url("**/ui/tasks/*/occurrences")
        timeline = page.locator("#occurrences")

        def both_seen() -> bool:
            page.reload()
            return (timeline.locator("li[data-outcome=run_created]").count() >= 1
                    and timeline.locator("li[data-outcome=skipped_active]").count() >= 1)

        wait_for(both_seen, 60)
    finally:
        world.api.post(f"/v1/tasks/{TB}/disable")
    assert page.locator("h1").inner_text() == f"{TB} 的调度记录"
    skipped = timeline.locator("li[data-outcome=skipped_active]").first
    assert "已跳过：上一次运行仍在进行（并发策略 forbid）" in skipped.inner_text()
    ran = timeline.locator("li[data-outcome=run_created]").first
    assert "已运行" in ran.inner_text() and "运行 #1" in ran.inner_text()
    _shot(page, "cluster-occurrences-zh-CN")
    ran.locator("a.occ-run").click()
    page.wait_for_url("**/ui/runs/*")
    assert page.locator(".run-facts").inner_text().count(TB) == 1
    context.close()


def test_workers_and_occurrences_fit_375px_in_english(world: World) -> None:
    page = world.sign_in(world.cluster.token("viewer"), locale="en-US")
    page.set_viewport_size({"width": 375, "height": 740})
    for name, path in (("workers", "/workers"), ("occurrences", f"/tasks/{JD}/occurrences")):
        page.goto(world.base + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375, name
        _shot(page, f"cluster-{name}-en-375px")
    page.goto(world.base + "/workers")
    assert page.locator("h1").inner_text() == "Workers"
    display = page.eval_on_selector("#workers tr", "e => getComputedStyle(e).display")
    assert display == "block"  # one card per worker
    page.context.close()
