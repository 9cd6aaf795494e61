"""Pinned tasks and saved views of the cluster panel at ``/ui`` in a real browser
(docs/panel.md "Pinned tasks and saved views"): chromium against a real ``ql3 control
serve`` over PostgreSQL (migration 0017) and moto's S3 server. An operator pins
``京东签到`` and sees it first, saves a view (a label filter and a sort), reopens it and
deletes it, in zh-CN and at 375 px; views are the token name's own; a viewer sees the
views but no pin or save controls, and its forged POSTs (CSRF token included) are 403."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


from test_cluster_browser import JD, World, _shot  # noqa: E402

pytest.importorskip("moto")
pytest.importorskip("psycopg")

from cluster_kit import ClusterDb, cluster_world, wait_for  # noqa: E402
from panel_harness import close_contexts  # noqa: E402

from pg_ahead import Ahead  # noqa: E402
from pg_reaper import Reaper  # noqa: E402

PHONE = {"width": 375, "height": 740}


def VIEW_URL(url: str) -> bool:  # noqa: N802 - read as the address the view opens
    return url.endswith("/ui/?q=platform%3Djd&sort=next_fire")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, moto_session: str,
          cluster_dbs: Ahead[ClusterDb], pg_reaper: Reaper, chromium: Any) -> Iterator[World]:
    """One replica (no worker: nothing here runs), four tasks, one browser."""
    tmp = tmp_path_factory.mktemp("panel-cluster-views")
    with cluster_world(tmp, moto_session, cluster_dbs.take(), reaper=pg_reaper) as cluster:
        control = cluster.start_control("c1", lease_ms=30_000, heartbeat_ms=2_000)
        url = str(control.url)
        api = cluster.api(url, cluster.token("admin"))
        for name, schedule, labels, enabled in (
                (JD, "0 8 * * *", {"platform": "jd"}, True),
                ("jd-a", "0 9 * * *", {"platform": "jd"}, False),  # no next fire
                ("jd-b", "0 6 * * *", {"platform": "jd"}, True),
                ("备份", "0 3 * * *", {"kind": "ops"}, True)):
            answer = api.post("/v1/tasks", json={
                "name": name, "shell": "true", "labels": labels, "enabled": enabled,
                "schedule": schedule, "timezone": "Asia/Shanghai"})
            assert answer.status_code == 201, answer.text
        try:
            yield World(cluster, url + "/ui", api, chromium)
        finally:
            close_contexts(chromium)
            api.close()


def _submit(page: Any, button: Any) -> None:
    """Click a form's button and wait for the page it leads to (often the same address)."""
    with page.expect_navigation():
        button.click()


def _names(page: Any) -> list[str]:
    """The rows' task names in page order (a writer's selection checkboxes hold them)."""
    names: list[str] = page.locator("tbody input[name=names]").evaluate_all(
        "boxes => boxes.map(b => b.value)")
    return names


def _views(world: World, token_name: str) -> list[tuple[str, str, str]]:
    with world.cluster.db.connect() as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT name, query, sort FROM panel_views WHERE token_name = %s ORDER BY name",
            (token_name,))]


def test_operator_pins_saves_reopens_and_deletes_a_view_in_chinese(world: World) -> None:
    page = world.sign_in(world.cluster.token("operator", name="运维-张三"))
    assert _names(page) == ["jd-a", "jd-b", JD, "备份"]
    _submit(page, page.get_by_role("button", name=f"置顶 {JD}"))
    assert _names(page)[0] == JD and "已置顶" in page.locator("tbody tr").first.inner_text()

    page.fill("#q", "platform=jd")
    wait_for(lambda: len(_names(page)) == 3, 10)
    page.select_option("#sort", "next_fire")
    wait_for(lambda: _names(page) == [JD, "jd-b", "jd-a"], 10)
    page.fill("#view-name", "京东任务")
    _submit(page, page.get_by_role("button", name="保存当前视图"))
    assert VIEW_URL(page.url)  # saved, and shown
    assert _views(world, "运维-张三") == [("京东任务", "platform=jd", "next_fire")]

    page.goto(world.base + "/")
    assert _names(page) == [JD, "jd-a", "jd-b", "备份"]
    page.get_by_role("link", name="打开视图 京东任务").click()
    page.wait_for_url(VIEW_URL)
    assert _names(page) == [JD, "jd-b", "jd-a"]
    assert page.input_value("#sort") == "next_fire"
    _shot(page, "cluster-tasks-views-zh-CN")

    phone = page.context.browser.new_context(locale="zh-CN", viewport=PHONE,
                                             storage_state=page.context.storage_state())
    small = phone.new_page()
    small.goto(page.url)
    assert small.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert small.get_by_role("button", name="删除视图 京东任务").is_visible()
    _shot(small, "cluster-tasks-views-zh-CN-375px")
    phone.close()

    other = world.sign_in(world.cluster.token("operator", name="运维-李四"))
    assert other.locator("#views").get_by_text("还没有保存的视图。").count() == 1  # own views
    assert _names(other)[0] == JD  # the pin is on the task: everyone's page
    other.context.close()

    _submit(page, page.get_by_role("button", name="删除视图 京东任务"))
    assert VIEW_URL(page.url)  # back to the page it was deleted from
    assert _views(world, "运维-张三") == []
    _submit(page, page.get_by_role("button", name=f"取消置顶 {JD}"))
    # the view's filter and sort, nothing pinned: the disabled jd-a (no next fire) last;
    # which of jd-b (06:00) and 京东签到 (08:00) comes first depends on the hour
    assert sorted(_names(page)[:2]) == ["jd-b", JD] and _names(page)[2] == "jd-a"
    assert "已置顶" not in page.locator("tbody").inner_text()
    page.context.close()


def test_viewer_sees_views_but_no_pin_or_save_and_forged_posts_are_403(
        world: World) -> None:
    with world.cluster.db.connect() as conn:
        conn.execute("INSERT INTO panel_views (token_name, name, query, sort)"
                     " VALUES ('看板-王五', '备份任务', 'kind=ops', '-name')")
        conn.commit()
    page = world.sign_in(world.cluster.token("viewer", name="看板-王五"), locale="en-US")
    assert page.get_by_role("button", name=f"Pin {JD}").count() == 0
    assert page.locator("#view-save, form[action$='/views/delete']").count() == 0
    page.get_by_role("link", name="Open view 备份任务").click()
    page.wait_for_url(lambda url: url.endswith("/ui/?q=kind%3Dops&sort=-name"))
    assert "备份" in page.locator("tbody").inner_text()
    assert JD not in page.locator("tbody").inner_text()
    csrf = str(page.locator("input[name=csrf]").first.get_attribute("value"))
    origin = world.base.rsplit("/ui", 1)[0]
    for path, form in (("/tasks/%E5%A4%87%E4%BB%BD/pin", {"csrf": csrf}),
                       ("/views/save", {"csrf": csrf, "name": "v", "q": "", "sort": "name"}),
                       ("/views/delete", {"csrf": csrf, "name": "备份任务"})):
        reply = page.request.post(world.base + path, headers={"Origin": origin}, form=form)
        assert reply.status == 403, path
    assert _views(world, "看板-王五") == [("备份任务", "kind=ops", "-name")]
    page.goto(world.base + "/")
    assert "Pinned" not in page.locator("tbody").inner_text()
    page.context.close()


def test_a_pin_post_without_csrf_is_refused(world: World) -> None:
    page = world.sign_in(world.cluster.token("operator"))
    reply = page.request.post(world.base + "/tasks/%E5%A4%87%E4%BB%BD/pin",
                              headers={"Origin": world.base.rsplit("/ui", 1)[0]},
                              form={"x": "1"})
    assert reply.status == 403
    page.goto(world.base + "/")
    assert "已置顶" not in page.locator("tbody").inner_text()
    page.context.close()
