"""The cluster's panel at ``/ui`` in a real browser (docs/panel.md "Cluster"): Debian's
chromium-headless-shell driven by Python playwright, against a real ``ql3 control serve``,
a real ``ql3 worker run``, PostgreSQL and moto's S3 server (``integration/cluster``'s
``cluster_kit``). One control replica, one worker and one browser for the module.

Screenshots go to ``$QL3_ARTIFACTS_DIR/panel`` (default ``./test-artifacts/panel``).
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]

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

from cluster_kit import Cluster, ClusterDb, cluster_world, wait_for  # noqa: E402
from panel_harness import close_contexts  # noqa: E402

from pg_ahead import Ahead  # noqa: E402
from pg_reaper import Reaper  # noqa: E402


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
def world(tmp_path_factory: pytest.TempPathFactory, moto_session: str,
          cluster_dbs: Ahead[ClusterDb], pg_reaper: Reaper, chromium: Any) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("panel-cluster")
    with cluster_world(tmp, moto_session, cluster_dbs.take(), reaper=pg_reaper) as cluster:
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
        try:
            yield World(cluster, url + "/ui", api, chromium)
        finally:
            close_contexts(chromium)
            api.close()


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


def test_the_open_log_follows_a_retried_attempt_and_the_first_stays_readable(
        world: World, tmp_path: Any) -> None:
    """docs/panel.md "Run detail" in the cluster: attempt 1 of `签到重试` prints a line and
    fails once the page shows it; the worker's retry (attempt 2, a shorter line) appears
    under a divider without a reload, and attempt 1's log is one link away."""
    go, mark = tmp_path / "go", tmp_path / "mark"
    answer = world.api.post("/v1/tasks", json={
        "name": "签到重试", "labels": {"zone": "a"}, "max_attempts": 2,
        "retry_backoff_ms": 500, "shell": (
            f"if [ -e '{mark}' ]; then echo 重试成功; exit 0; fi; touch '{mark}'; "
            "echo 第一次尝试失败了，稍后重试; i=0; "
            f"while [ ! -e '{go}' ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i+1)); done; "
            "exit 3")})
    assert answer.status_code == 201, answer.text
    page = world.sign_in(world.cluster.token("operator", name="运维-retry"))
    row = page.locator("tr", has_text="签到重试")
    row.get_by_role("button", name="运行 签到重试").click()
    page.wait_for_url("**/ui/runs/*")
    log = page.locator("#log")
    log.get_by_text("第一次尝试失败了，稍后重试").wait_for(timeout=60_000)
    page.evaluate("window.__samePage = 1")
    # run-facts: titled NAME#N; the status follows the run without a reload
    assert page.locator("h1").inner_text() == "签到重试#1"
    wait_for(lambda: page.locator("#run-status").inner_text() == "运行中", 30)
    go.touch()
    log.locator(".line.attempt", has_text="第 2 次尝试").wait_for(timeout=60_000)
    log.get_by_text("重试成功").wait_for(timeout=60_000)
    wait_for(lambda: log.get_attribute("data-done") == "true", 60)
    assert page.evaluate("window.__samePage") == 1
    assert [t.strip() for t in log.locator(".line").all_inner_texts()] == [
        "第一次尝试失败了，稍后重试", "── 第 2 次尝试 ──", "重试成功"]
    assert page.locator("#run-status").inner_text() == "成功"
    first = page.locator(".run-attempt[data-attempt='1']")
    second = page.locator(".run-attempt[data-attempt='2']")
    assert first.locator("[data-fact='status']").inner_text() == "失败"
    assert first.locator("[data-fact='exit']").inner_text() == "3"
    assert first.locator("[data-fact='duration']").inner_text().endswith("秒")
    assert second.locator("[data-fact='exit']").inner_text() == "0"
    assert second.locator("[data-fact='finished'] time").count() == 1
    page.locator("#run-attempts").get_by_role("link", name="第 1 次尝试").click()
    page.wait_for_url("**attempt=1")
    page.locator("#log[data-done='true']").wait_for(timeout=60_000)
    assert [t.strip() for t in page.locator("#log .line").all_inner_texts()] == [
        "第一次尝试失败了，稍后重试"]
    assert "第 1 次尝试的日志到此结束" in page.locator("#log").inner_text()
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
def _tarball(files: dict[str, str]) -> bytes:
    import io
    import tarfile

    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_upload_browse_and_delete_a_bundle_refused_while_used(world: World,
                                                              tmp_path: Path) -> None:
    page = world.sign_in(world.cluster.token("admin", name="管理员"))
    page.get_by_role("link", name="脚本").click()
    page.wait_for_url(world.base + "/bundles")
    assert "ql3 cluster script push" in page.content()  # how scripts get in, said on the page
    archive = tmp_path / "jd.tar.gz"
    archive.write_bytes(_tarball({"签到.sh": "echo 京东签到 脚本包\n", "lib/工具.sh": "true\n"}))
    page.get_by_label(".tar.gz 脚本包，或单个脚本文件").set_input_files(str(archive))
    page.get_by_role("button", name="上传", exact=True).click()
    page.wait_for_url("**/bundles/*?pushed=new")
    digest = page.url.rsplit("/", 1)[1].split("?")[0]
    assert "已上传：新的脚本包" in page.locator("[role=status]").inner_text()
    assert "没有任务使用它" in page.content()
    page.get_by_role("link", name="签到.sh").click()
    page.wait_for_url("**/file?path=*")
    assert "echo 京东签到 脚本包" in page.locator("pre").inner_text()
    _shot(page, "cluster-bundle-file-zh-CN")
    page.set_viewport_size({"width": 375, "height": 740})  # a phone: nothing wider
    for path in ("/bundles", f"/bundles/{digest}",
                 f"/bundles/{digest}/file?path=lib/工具.sh"):
        page.goto(world.base + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375, path
    _shot(page, "cluster-bundle-file-zh-CN-375px")
    page.set_viewport_size(DESKTOP)
    # a task uses it: the page names the task and the delete is refused, nothing removed
    made = world.api.post("/v1/tasks", json={
        "name": "包任务", "bundle_digest": digest, "entry_point": "签到.sh",
        "schedule": "0 8 * * *", "timezone": "Asia/Shanghai"})
    assert made.status_code == 201, made.text
    page.goto(f"{world.base}/bundles/{digest}")
    assert page.locator("ul.bundle-tasks li", has_text="包任务").count() == 1
    with page.expect_response(lambda r: r.url.endswith("/delete")) as answer:
        page.get_by_role("button", name="删除脚本包").click()
    assert answer.value.status == 409
    assert "有任务使用此脚本包" in page.locator("#bundle-problem").inner_text()
    assert world.api.get(f"/v1/scripts/{digest}").status_code == 200
    _shot(page, "cluster-bundle-in-use-zh-CN")
    # once no task uses it, an admin deletes it
    assert world.api.delete("/v1/tasks/%E5%8C%85%E4%BB%BB%E5%8A%A1").status_code in (200, 204)
    page.goto(f"{world.base}/bundles/{digest}")
    page.get_by_role("button", name="删除脚本包").click()
    page.wait_for_url("**/bundles?removed=1")
    assert world.api.get(f"/v1/scripts/{digest}").status_code == 404
    page.context.close()


def test_one_file_uploads_as_a_bundle_and_a_viewer_cannot_upload_or_delete(
        world: World, tmp_path: Path) -> None:
    page = world.sign_in(world.cluster.token("operator"), locale="en-US")
    page.goto(world.base + "/bundles")
    single = tmp_path / "每日签到.py"
    single.write_text("print('每日签到')\n", encoding="utf-8")
    page.get_by_label(".tar.gz bundle, or one script file").set_input_files(str(single))
    page.get_by_role("button", name="Upload", exact=True).click()
    page.wait_for_url("**/bundles/*?pushed=*")
    digest = page.url.rsplit("/", 1)[1].split("?")[0]
    assert page.get_by_role("link", name="每日签到.py").count() == 1
    assert page.get_by_role("button", name="Delete bundle").count() == 0  # operator
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    origin = world.base.rsplit("/ui", 1)[0]
    reply = page.request.post(f"{world.base}/bundles/{digest}/delete",
                              headers={"Origin": origin}, form={"csrf": str(csrf)})
    assert reply.status == 403  # removing needs admin
    page.context.close()
    viewer = world.sign_in(world.cluster.token("viewer"), locale="en-US")
    viewer.goto(f"{world.base}/bundles/{digest}")
    assert viewer.get_by_role("link", name="每日签到.py").count() == 1
    assert viewer.locator("form[action$='/upload'], form[action$='/delete']").count() == 0
    viewer.goto(world.base + "/bundles")
    assert viewer.locator("input[type=file]").count() == 0
    csrf = viewer.locator("input[name=csrf]").first.get_attribute("value")
    forged = viewer.request.post(f"{world.base}/bundles/upload", headers={"Origin": origin},
                                 multipart={"csrf": str(csrf), "bundle": {
                                     "name": "x.py", "mimeType": "text/plain",
                                     "buffer": b"print(1)\n"}})
    assert forged.status == 403
    for path in (f"/bundles/{digest}/delete",):
        assert viewer.request.post(world.base + path, headers={"Origin": origin},
                                   form={"csrf": str(csrf)}).status == 403
    assert world.api.get(f"/v1/scripts/{digest}").status_code == 200
    _shot(viewer, "cluster-bundles-viewer-en")
    viewer.context.close()
def _origin(world: World) -> str:
    return world.base.rsplit("/ui", 1)[0]


def _token_named(world: World, name: str) -> dict[str, Any]:
    answer = world.api.get("/v1/tokens")
    assert answer.status_code == 200, answer.text
    found = [t for t in answer.json() if t["name"] == name]
    assert len(found) == 1, found
    return dict(found[0])


def _settings(page: Any, world: World) -> None:
    page.get_by_role("link", name="设置").click()
    page.wait_for_url(world.base + "/settings")


def test_admin_creates_a_chinese_token_sees_it_once_and_revokes_it(world: World) -> None:
    name = "运维令牌-张三"
    admin = world.sign_in(world.cluster.token("admin"))
    _settings(admin, world)
    admin.get_by_label("名称", exact=True).fill(name)
    admin.get_by_label("权限", exact=True).select_option("operator")
    admin.get_by_role("button", name="创建令牌").click()
    admin.wait_for_url(world.base + "/settings/tokens")
    secret = admin.locator("#token-secret").input_value()
    assert secret.startswith("ql3_") and name in admin.locator("main").inner_text()
    _shot(admin, "cluster-token-issued-zh-CN")
    admin.goto(world.base + "/settings")  # the list: its record, never the secret again
    row = admin.locator("#settings-tokens tr", has_text=name)
    assert "operator" in row.inner_text() and "长期有效" in row.inner_text()
    assert secret not in admin.content()
    record = _token_named(world, name)
    assert record["scope"] == "operator" and record["revoked_at"] is None
    # a browser signed in with the new token
    other = world.sign_in(secret)
    assert other.locator("tr", has_text=JD).count() == 1
    admin.reload()
    row = admin.locator("#settings-tokens tr", has_text=name)
    assert "从未" not in row.inner_text()  # its session's request is its last use
    row.get_by_role("button", name=f"吊销 {name}").click()
    admin.wait_for_url(f"**/settings/tokens/{record['id']}/revoke")
    assert name in admin.locator("main").inner_text()
    assert admin.locator("#revoke-own").count() == 0  # not the admin's own token
    admin.locator("#revoke-confirm").click()
    admin.wait_for_url(world.base + "/settings?revoked=1")
    assert "已于" in admin.locator("#settings-tokens tr", has_text=name).inner_text()
    assert _token_named(world, name)["revoked_at"] is not None
    response = other.goto(world.base + "/")  # the session signed in with it is gone
    assert response is not None and response.status == 401
    assert other.locator("#token").count() == 1
    other.context.close()
    admin.context.close()


def test_revoking_the_token_you_are_signed_in_with_signs_you_out(world: World) -> None:
    name = "临时管理员"
    page = world.sign_in(world.cluster.token("admin", name=name), locale="en-US")
    page.goto(world.base + "/settings")
    page.locator("#settings-tokens tr", has_text=name).get_by_role(
        "button", name=f"Revoke {name}").click()
    page.locator("#revoke-own").wait_for()
    page.locator("#revoke-confirm").click()
    page.wait_for_url(world.base + "/settings?revoked=1")
    assert page.locator("#token").count() == 1  # answered with the sign-in form (401)
    assert page.locator("#settings-tokens").count() == 0
    page.context.close()


@pytest.mark.parametrize("scope", ["viewer", "operator"])
def test_non_admins_see_no_token_controls_and_forged_posts_are_403(
        world: World, scope: str) -> None:
    target = f"吊销目标-{scope}"
    world.cluster.token("viewer", name=target)
    target_id = _token_named(world, target)["id"]
    page = world.sign_in(world.cluster.token(scope), locale="en-US")
    page.get_by_role("link", name="Settings").click()
    page.wait_for_url(world.base + "/settings")
    assert page.locator("#settings-admin-only").count() == 1
    assert page.locator("form[action$='/settings/tokens'], a[href$='/revoke'],"
                        " form[action$='/notify/test']").count() == 0
    assert target not in page.content()
    _shot(page, f"cluster-settings-{scope}-en")
    csrf = str(page.locator("input[name=csrf]").first.get_attribute("value"))
    forged = f"伪造-{scope}"
    for path, form in ((f"/settings/tokens/{target_id}/revoke", {"csrf": csrf}),
                       ("/settings/tokens", {"csrf": csrf, "name": forged,
                                             "scope": "admin"}),
                       ("/settings/notify/test", {"csrf": csrf})):
        reply = page.request.post(world.base + path, headers={"Origin": _origin(world)},
                                  form=form)
        assert reply.status == 403, path
    assert page.request.get(world.base + f"/settings/tokens/{target_id}/revoke").status == 403
    names = {t["name"]: t for t in world.api.get("/v1/tokens").json()}
    assert forged not in names and names[target]["revoked_at"] is None
    page.context.close()


def test_the_sign_in_log_shows_a_failed_and_a_successful_sign_in(world: World) -> None:
    name = "登录记录-admin"
    token = world.cluster.token("admin", name=name)
    page = world.page()
    page.goto(world.base + "/signin")
    page.fill("#token", "ql3_" + "x" * 43)
    page.get_by_role("button", name="登录").click()
    assert page.locator("#token").count() == 1  # refused: the form again

    def signed_in() -> bool:  # the address waits a second after the failure (429 until)
        page.goto(world.base + "/signin")
        if page.locator("#token").count() == 0:
            return True
        page.fill("#token", token)
        page.get_by_role("button", name="登录").click()
        page.wait_for_load_state()
        return page.url == world.base + "/"

    wait_for(signed_in, 30)
    page.goto(world.base + "/settings")
    log = page.locator("#settings-signins")
    ok = log.locator("tr.signin-ok", has_text=name).first
    assert "127.0.0.1" in ok.inner_text() and "登录成功" in ok.inner_text()
    failed = log.locator("tr.signin-failed").first
    assert "127.0.0.1" in failed.inner_text() and "被拒绝" in failed.inner_text()
    rows = log.locator("tbody tr")
    texts = [rows.nth(i).inner_text() for i in range(rows.count())]
    newest_ok = next(i for i, text in enumerate(texts) if name in text)
    assert any("被拒绝" in text for text in texts[newest_ok + 1:])  # failed, then signed in
    assert page.locator("#settings-notify").count() == 1
    _shot(page, "cluster-settings-zh-CN")
    page.set_viewport_size({"width": 375, "height": 740})
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, width
    _shot(page, "cluster-settings-zh-CN-phone")
    page.context.close()


def test_admin_tests_the_push_channels_through_the_real_notify_path(world: World) -> None:
    got: list[bytes] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(self.rfile.read(int(self.headers.get("content-length") or 0)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    secret_path = "hook-秘密路径-7f3a"
    answer = world.api.post("/v1/notify/channels", json={
        "url": f"json://127.0.0.1:{port}/{secret_path}", "notify_on": ["failed"]})
    assert answer.status_code == 201, answer.text
    try:
        page = world.sign_in(world.cluster.token("admin"))
        page.goto(world.base + "/settings")
        channels = page.locator("#settings-notify")
        assert f"json://127.0.0.1:{port}/…" in channels.inner_text()
        assert secret_path not in page.content()
        page.get_by_role("button", name="发送测试通知").click()
        page.wait_for_url(world.base + "/settings/notify/test")
        assert f"json://127.0.0.1:{port}/…: 已送达" in page.locator(
            "#settings-deliveries").inner_text()
        assert len(got) == 1 and b"ql3-notify-test" in got[0]
        _shot(page, "cluster-settings-notify-test-zh-CN")
        page.context.close()
    finally:
        world.api.delete(f"/v1/notify/channels/{answer.json()['id']}")
        server.shutdown()
        server.server_close()


def _channels(world: World) -> list[dict[str, Any]]:
    answer = world.api.get("/v1/notify/channels")
    assert answer.status_code == 200, answer.text
    return list(answer.json())


def test_admin_adds_a_chinese_push_channel_sees_it_without_its_url_and_removes_it(
        world: World) -> None:
    host, secret = "推送.例子.cn", "秘密路径-9c1d-令牌"
    target = f"json://{host}/…"
    admin = world.sign_in(world.cluster.token("admin", name="渠道管理员"))
    _settings(admin, world)
    form = admin.locator("#channel-form")
    form.get_by_label("Apprise 地址", exact=True).fill(f"不是 地址 {secret}")
    form.get_by_role("button", name="添加渠道").click()
    admin.locator("#chan-error").wait_for()  # refused in Chinese, the text never echoed
    assert "不是 Apprise 地址" in admin.locator("#chan-error").inner_text()
    assert secret not in admin.content()
    form = admin.locator("#channel-form")
    form.get_by_label("Apprise 地址", exact=True).fill(f"json://{host}/{secret}")
    form.get_by_label("成功", exact=True).check()
    form.get_by_role("button", name="添加渠道").click()
    admin.wait_for_url(f"{world.base}/settings?channel_added=*")
    assert admin.locator("#chan-added").count() == 1
    row = admin.locator("#settings-notify tr", has_text=target)
    assert row.count() == 1 and "succeeded" in row.inner_text()
    assert secret not in admin.content()
    assert admin.locator("#chan-url").input_value() == ""  # write-only: never shown back
    [record] = [c for c in _channels(world) if c["target"] == target]
    assert record["created_by"] == "渠道管理员" and "url" not in record
    assert record["notify_on"] == ["failed", "timed_out", "lost", "succeeded"]
    _shot(admin, "cluster-settings-channel-added-zh-CN")
    row.get_by_role("button", name=f"删除 {target}").click()
    admin.wait_for_url(f"**/settings/channels/{record['id']}/remove")
    assert target in admin.locator("main").inner_text()
    assert [c for c in _channels(world) if c["id"] == record["id"]]  # not before confirming
    admin.locator("#chan-remove-confirm").click()
    admin.wait_for_url(world.base + "/settings?channel_removed=1")
    assert admin.locator("#chan-removed").count() == 1
    assert admin.locator("#settings-notify tr", has_text=target).count() == 0
    assert not [c for c in _channels(world) if c["id"] == record["id"]]
    admin.context.close()


@pytest.mark.parametrize("scope", ["viewer", "operator"])
def test_non_admins_see_no_channel_controls_and_forged_channel_posts_are_403(
        world: World, scope: str) -> None:
    kept = world.api.post("/v1/notify/channels", json={
        "url": f"json://{scope}.keep.example/秘密-{scope}"})
    assert kept.status_code == 201, kept.text
    kept_id = kept.json()["id"]
    try:
        page = world.sign_in(world.cluster.token(scope), locale="en-US")
        page.goto(world.base + "/settings")
        assert page.locator("#channel-form, a[href*='/settings/channels/']").count() == 0
        csrf = str(page.locator("input[name=csrf]").first.get_attribute("value"))
        forged = f"json://{scope}.forged.example/伪造"
        for path, form in (("/settings/channels", {"csrf": csrf, "url": forged,
                                                   "notify_on": "failed"}),
                           (f"/settings/channels/{kept_id}/remove", {"csrf": csrf})):
            reply = page.request.post(world.base + path, form=form, headers={
                "Origin": _origin(world), "Accept-Language": "en-US"})  # as the browser's
            assert reply.status == 403, path
            text = reply.text()
            # in the session's language: a viewer's refused at the guard, an operator's here
            assert ("This token may look but not change anything." if scope == "viewer"
                    else "Only an admin sign-in may do this.") in text
            assert "forged.example" not in text and "秘密" not in text
        assert page.request.get(world.base + f"/settings/channels/{kept_id}/remove"
                                ).status == 403
        targets = {c["target"]: c["id"] for c in _channels(world)}
        assert f"json://{scope}.forged.example/…" not in targets
        assert kept_id in targets.values()
        page.context.close()
    finally:
        world.api.delete(f"/v1/notify/channels/{kept_id}")
