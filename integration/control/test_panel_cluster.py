"""The cluster's web panel at ``/ui`` over real HTTP and real PostgreSQL as the runtime role
(docs/panel.md "Cluster"; DESIGN §4.6): API-token sign-in, server-side sessions (hashed ids,
dying with their token), scopes, CSRF and Origin, the throttle on failed sign-ins shared
through PostgreSQL, sign-out, the sweep, and the pages over ``ControlPanelBackend``: the
task form (admin only: an operator's GETs and POSTs 403, the backend refusing too; the
API's refusals worded in zh-CN beside their fields; an edit keeping a secret), Runs across
tasks with filters and keyset pages, the Overview of the last 24 hours, and Variables
(operator writes, every value masked, pool scopes shown)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from api_world import ApiWorld

from qinglong.control.panel_sessions import PanelSessionStore, session_hash
from qinglong.panel.security import SignInRefusedError, SignInThrottledError
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
_OPEN: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def _close_browsers() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def _browser(api: ApiWorld) -> httpx.Client:
    """A cookie-keeping client of the same server, sending its Origin like a browser."""
    base = str(api.client.base_url).rstrip("/")
    client = httpx.Client(base_url=base, timeout=30, headers={"Origin": base})
    _OPEN.append(client)
    return client


def _sign_in(client: httpx.Client, token: str) -> httpx.Response:
    return client.post("/ui/signin", data={"token": token})


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:300]
    return found.group(1)


def _make_task(api: ApiWorld, name: str, labels: dict[str, str] | None = None,
               **fields: Any) -> None:
    answer = api.client.post("/v1/tasks", json={"name": name, "shell": "sleep 600",
                                                "labels": labels or {}, **fields},
                             headers=api.as_("admin"))
    assert answer.status_code == 201, answer.text


def _run(api: ApiWorld, name: str) -> str:
    """A run of ``name`` requested through the API (queued: no worker serves this world)."""
    answer = api.client.post(f"/v1/tasks/{name}/run", headers=api.as_("operator"))
    assert answer.status_code in (200, 201, 202), answer.text
    return str(answer.json()["id"])


def _run_ids(page: str) -> list[str]:
    """The run ids linked from a Runs page's table, in page order."""
    return re.findall(r'href="/ui/runs/([0-9a-f-]{36})"', page)


def _signed_in(api: ApiWorld, scope: str) -> tuple[httpx.Client, str]:
    client = _browser(api)
    answer = _sign_in(client, api.tokens[scope])
    assert answer.status_code == 303, answer.text
    page = client.get("/ui/")
    assert page.status_code == 200
    return client, _csrf(page.text)


def test_sign_in_sets_a_strict_cookie_whose_hash_alone_is_stored(api: ApiWorld) -> None:
    client = _browser(api)
    assert client.get("/ui/").status_code == 401  # signed out: the token form
    answer = _sign_in(client, api.tokens["operator"])
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"
    cookie = answer.headers["set-cookie"]
    assert "ql3_session=" in cookie and "HttpOnly" in cookie
    assert "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Secure" not in cookie  # plain http from a client that is not a proxy's
    session_id = client.cookies["ql3_session"]
    rows = api.sql("SELECT s.id_sha256, t.name, s.idle_expires_at <= s.absolute_expires_at"
                   " FROM panel_sessions s JOIN api_tokens t ON t.id = s.token_id")
    assert rows == [(session_hash(session_id), "operator-token", True)]
    assert session_id not in str(api.sql("SELECT * FROM panel_sessions"))
    # several sessions per token: a second browser signs in beside the first
    other = _browser(api)
    assert _sign_in(other, api.tokens["operator"]).status_code == 303
    assert api.sql("SELECT count(*) FROM panel_sessions") == [(2,)]
    assert client.get("/ui/").status_code == 200 and other.get("/ui/").status_code == 200


@pytest.fixture
def behind_proxy(pg_db: Any) -> Iterator[ApiWorld]:
    """The API whose panel trusts 127.0.0.1 as its reverse proxy (``--trusted-proxy``)."""
    from api_world import close_world, open_world

    world = open_world(pg_db, panel_trusted_proxies=("127.0.0.1",))
    try:
        yield world
    finally:
        close_world(world)


def test_secure_cookie_behind_a_trusted_proxy_saying_https(behind_proxy: ApiWorld) -> None:
    client = _browser(behind_proxy)
    answer = client.post("/ui/signin", data={"token": behind_proxy.tokens["viewer"]},
                         headers={"X-Forwarded-Proto": "https",
                                  "Origin": "https://" + client.base_url.netloc.decode()})
    assert answer.status_code == 303, answer.text
    assert "Secure" in answer.headers["set-cookie"]


def test_forwarded_headers_from_a_peer_not_trusted_are_ignored(api: ApiWorld) -> None:
    """No --trusted-proxy: X-Forwarded-Proto makes no Secure cookie (and an https Origin no
    longer matches the request's own), X-Forwarded-For no other client address."""
    client = _browser(api)
    base = client.base_url.netloc.decode()
    spoofed = client.post("/ui/signin", data={"token": api.tokens["viewer"]},
                          headers={"X-Forwarded-Proto": "https", "Origin": "https://" + base})
    assert spoofed.status_code == 403  # the origin is http://, as the peer really sent
    answer = client.post("/ui/signin", data={"token": api.tokens["viewer"]},
                         headers={"X-Forwarded-Proto": "https"})
    assert answer.status_code == 303, answer.text
    assert "Secure" not in answer.headers["set-cookie"]


def test_a_spoofed_forwarded_for_does_not_escape_the_throttle(api: ApiWorld) -> None:
    client = _browser(api)
    failed = client.post("/ui/signin", data={"token": "ql3_" + "y" * 43},
                         headers={"X-Forwarded-For": "203.0.113.1"})
    assert failed.status_code == 403
    assert api.sql("SELECT client FROM panel_signin_failures") == [("127.0.0.1",)]
    again = client.post("/ui/signin", data={"token": api.tokens["admin"]},
                        headers={"X-Forwarded-For": "203.0.113.2"})
    assert again.status_code == 429  # the peer's own address waits, whatever it claims


def test_behind_a_trusted_proxy_each_forwarded_client_has_its_own_count(
        behind_proxy: ApiWorld) -> None:
    client = _browser(behind_proxy)
    failed = client.post("/ui/signin", data={"token": "ql3_" + "y" * 43},
                         headers={"X-Forwarded-For": "198.51.100.9, 203.0.113.1"})
    assert failed.status_code == 403
    # the rightmost address the proxy appended, not what the client wrote before it
    assert behind_proxy.sql("SELECT client FROM panel_signin_failures") == [("203.0.113.1",)]
    other = client.post("/ui/signin", data={"token": behind_proxy.tokens["admin"]},
                        headers={"X-Forwarded-For": "203.0.113.2"})
    assert other.status_code == 303, other.text  # another client is not blocked
    blocked = _browser(behind_proxy).post(
        "/ui/signin", data={"token": behind_proxy.tokens["admin"]},
        headers={"X-Forwarded-For": "203.0.113.1"})
    assert blocked.status_code == 429


@pytest.mark.parametrize("which", ["worker", "revoked", "junk"])
def test_worker_revoked_and_junk_tokens_are_refused_alike(api: ApiWorld, which: str) -> None:
    token = {"worker": api.tokens["worker"], "revoked": api.issue("operator", revoked=True),
             "junk": "ql3_" + "x" * 43}[which]
    answer = _sign_in(_browser(api), token)
    assert answer.status_code == 403 and "set-cookie" not in answer.headers
    assert token not in answer.text
    assert api.sql("SELECT count(*) FROM panel_sessions") == [(0,)]


def test_failed_sign_ins_wait_longer_each_time_on_every_replica(api: ApiWorld) -> None:
    client = _browser(api)
    waits = []
    for _ in range(4):
        assert _sign_in(client, "ql3_" + "y" * 43).status_code == 403
        waits.append(api.sql("SELECT extract(epoch FROM blocked_until - last_failed_at)::int,"
                             " failures FROM panel_signin_failures")[0])
        # the wait has passed (moved into the past by the schema owner, not by sleeping)
        api.sql("UPDATE panel_signin_failures SET blocked_until = now() - interval '1 s'")
    assert waits == [(1, 1), (2, 2), (4, 3), (8, 4)]
    api.sql("UPDATE panel_signin_failures SET blocked_until = now() + interval '1 hour'")
    blocked = _sign_in(client, api.tokens["admin"])  # even the right token waits
    assert blocked.status_code == 429 and 3500 <= int(blocked.headers["retry-after"]) <= 3600
    # another replica (its own store over the same database) sees the same wait
    with pytest.raises(SignInThrottledError):
        PanelSessionStore(api.engine).sign_in(api.tokens["admin"], "127.0.0.1")
    assert PanelSessionStore(api.engine).sign_in(api.tokens["admin"], "10.0.0.9").can_write
    api.sql("UPDATE panel_signin_failures SET blocked_until = now() - interval '1 s'")
    assert _sign_in(client, api.tokens["admin"]).status_code == 303  # success clears it
    assert api.sql("SELECT count(*) FROM panel_signin_failures") == [(0,)]


def test_tasks_page_lists_searches_filters_by_label_and_pages(api: ApiWorld) -> None:
    _make_task(api, "京东签到", {"platform": "京东"})
    _make_task(api, "淘宝签到", {"platform": "淘宝"})
    for n in range(3):
        _make_task(api, f"zz-{n}")
    client, _ = _signed_in(api, "viewer")
    page = client.get("/ui/").text
    assert "京东签到" in page and "淘宝签到" in page and "platform=京东" in page
    only = client.get("/ui/", params={"q": "platform=京东"}).text
    assert "京东签到" in only and "淘宝签到" not in only
    text = client.get("/ui/", params={"q": "淘宝"}).text
    assert "淘宝签到" in text and "京东签到" not in text
    partial = client.get("/ui/", params={"q": "zz"}, headers={"HX-Request": "true"})
    assert partial.status_code == 200 and "<html" not in partial.text
    assert partial.text.count('class="task-name">zz-') == 3  # one row each
    assert 'href="/ui/static/panel.css"' in page  # links carry the mount


def test_a_search_counts_every_match_and_pages_through_them_in_name_order(
        api: ApiWorld) -> None:
    for n in reversed(range(53)):  # created out of name order
        _make_task(api, f"批量签到-{n:02d}", {"zone": "a"} if n % 2 else None)
    for n in range(3):
        _make_task(api, f"other-{n}")
    _run(api, "批量签到-01")
    client, _ = _signed_in(api, "viewer")

    def names(params: dict[str, str]) -> tuple[list[str], str]:
        page = client.get("/ui/", params=params)
        assert page.status_code == 200, page.text[:300]
        return re.findall(r'class="task-name">([^<]+?)(?: <small|</td>)', page.text), page.text

    first, text = names({"q": "批量签到"})
    assert first == [f"批量签到-{n:02d}" for n in range(50)]
    assert "第 1–50 条，共 53 条" in text
    assert 'href="/ui/runs/' in text  # the last run of 批量签到-01 is still shown
    second, text = names({"q": "批量签到", "offset": "50"})
    assert second == ["批量签到-50", "批量签到-51", "批量签到-52"]
    assert "第 51–53 条，共 53 条" in text
    past, text = names({"q": "批量签到", "offset": "100"})
    assert past == [] and "共 53 条" in text  # past the end: the count still said
    both, text = names({"q": "zone=a 批量签到"})  # a label filter and a search together
    assert both == [f"批量签到-{n:02d}" for n in range(1, 53, 2)]
    assert "共 26 条" in text
    none, text = names({"q": "拼多多"})
    assert none == [] and "第 0–0 条，共 0 条" in text


def test_viewer_sees_no_write_controls_and_a_forged_post_is_403(api: ApiWorld) -> None:
    _make_task(api, "京东签到")
    client, csrf = _signed_in(api, "viewer")
    page = client.get("/ui/").text
    assert "/run\"" not in page and "/disable" not in page and "京东签到" in page
    forged = client.post("/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/run",
                         data={"csrf": csrf})
    assert forged.status_code == 403
    assert api.sql("SELECT count(*) FROM runs") == [(0,)]


def test_operator_runs_disables_and_stops_with_csrf_and_origin(api: ApiWorld) -> None:
    _make_task(api, "京东签到")
    client, csrf = _signed_in(api, "operator")
    path = "/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/run"
    assert client.post(path).status_code == 403  # no CSRF token
    assert client.post(path, data={"csrf": "x" * 43}).status_code == 403
    assert client.post(path, data={"csrf": csrf},
                       headers={"Origin": "http://evil.example"}).status_code == 403
    assert api.sql("SELECT count(*) FROM runs") == [(0,)]
    ran = client.post(path, data={"csrf": csrf})
    assert ran.status_code == 303 and ran.headers["location"].startswith("/ui/runs/")
    run_id = ran.headers["location"].rsplit("/", 1)[1]
    detail = client.get(f"/ui/runs/{run_id}").text
    assert "京东签到" in detail and f"/ui/runs/{run_id}/stop" in detail
    events = api.sql("SELECT kind, detail->>'by' FROM task_events WHERE kind ="
                     " 'run_requested'")
    assert events == [("run_requested", "operator-token")]
    stopped = client.post(f"/ui/runs/{run_id}/stop", data={"csrf": csrf})
    assert stopped.status_code == 303
    assert api.sql("SELECT status FROM runs WHERE id = %(r)s", {"r": run_id}) == [
        ("cancelled",)]
    off = client.post("/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/disable",
                      data={"csrf": csrf})
    assert off.status_code == 303
    assert api.sql("SELECT enabled FROM tasks") == [(False,)]


def test_revoking_the_token_ends_its_sessions_at_once_and_sign_out_ends_one(
        api: ApiWorld) -> None:
    token = api.issue("operator")
    first, _ = _browser(api), None
    assert _sign_in(first, token).status_code == 303
    second, csrf = _browser(api), None
    assert _sign_in(second, token).status_code == 303
    csrf = _csrf(second.get("/ui/").text)
    assert second.post("/ui/signout", data={"csrf": csrf}).status_code == 303
    assert second.get("/ui/").status_code == 401
    assert first.get("/ui/").status_code == 200  # signing out ends only that session
    api.sql("UPDATE api_tokens SET revoked_at = now() WHERE name = 'operator-token-2'")
    assert first.get("/ui/").status_code == 401


def test_the_sweep_deletes_expired_and_revoked_sessions(api: ApiWorld) -> None:
    store = PanelSessionStore(api.engine)
    keep = store.sign_in(api.tokens["viewer"], "a")
    idle = store.sign_in(api.tokens["viewer"], "b")
    gone = store.sign_in(api.issue("operator"), "c")
    api.sql("UPDATE panel_sessions SET idle_expires_at = now() - interval '1 s'"
            " WHERE id_sha256 = %(s)s", {"s": session_hash(idle.id)})
    api.sql("UPDATE api_tokens SET revoked_at = now() WHERE name = 'operator-token-2'")
    assert store.get(idle.id) is None and store.get(gone.id) is None
    assert store.sweep() == 2
    assert [r[0] for r in api.sql("SELECT id_sha256 FROM panel_sessions")] == [
        session_hash(keep.id)]
    assert store.get(keep.id) is not None


def test_sign_ins_are_logged_and_the_sweep_forgets_rows_past_90_days(api: ApiWorld) -> None:
    store = PanelSessionStore(api.engine)  # the runtime role
    with pytest.raises(SignInRefusedError):
        store.sign_in("ql3_" + "x" * 43, "198.51.100.7")
    store.sign_in(api.tokens["admin"], "203.0.113.9")
    rows = api.sql("SELECT s.client, s.ok, s.token_name, t.scope FROM panel_signins s"
                   " LEFT JOIN api_tokens t ON t.id = s.token_id ORDER BY s.at, s.id")
    admin_name = api.sql("SELECT name FROM api_tokens WHERE scope = 'admin'")[0][0]
    assert rows == [("198.51.100.7", False, None, None),
                    ("203.0.113.9", True, admin_name, "admin")]
    api.sql("UPDATE panel_signins SET at = now() - interval '91 days' WHERE NOT ok")
    assert store.sweep() == 1
    assert [r[0] for r in api.sql("SELECT client FROM panel_signins")] == ["203.0.113.9"]


def test_log_stream_follows_with_the_cookie_session(api: ApiWorld) -> None:
    _make_task(api, "京东签到")
    client, csrf = _signed_in(api, "operator")
    ran = client.post("/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/run", data={"csrf": csrf})
    run_id = ran.headers["location"].rsplit("/", 1)[1]
    client.post(f"/ui/runs/{run_id}/stop", data={"csrf": csrf})  # queued: cancelled now
    lines: list[Any] = []
    with client.stream("GET", f"/ui/runs/{run_id}/log/stream") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            lines.append(line)
            if line.startswith("data: ") and lines[-2:-1] == ["event: end"]:
                break
    assert "event: end" in lines and 'data: "cancelled"' in lines
    anonymous = _browser(api).get(f"/ui/runs/{run_id}/log/stream")
    assert anonymous.status_code == 401


def test_task_definitions_need_the_admin_scope_an_operator_gets_403(api: ApiWorld) -> None:
    _make_task(api, "京东签到")
    _make_task(api, "淘宝签到")
    client, csrf = _signed_in(api, "operator")
    page = client.get("/ui/", headers={"Accept-Language": "en"}).text
    for hidden in ("/ui/tasks/new", "/edit", "?copy=", 'value="delete"'):
        assert hidden not in page, hidden
    for shown in ('href="/ui/runs"', 'href="/ui/dashboard"', 'href="/ui/vars"',
                  'href="/ui/bundles"', 'value="disable"'):
        assert shown in page, shown
    assert 'href="/ui/scripts"' not in page  # the local folder: the cluster has bundles
    for path in ("/ui/scripts", "/ui/scripts/new"):
        assert client.get(path, headers={"Accept-Language": "en"}).status_code == 501, path
    for path in ("/ui/tasks/new", "/ui/tasks/new?copy=%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0",
                 "/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/edit",
                 "/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/delete"):
        reply = client.get(path, headers={"Accept-Language": "en"})
        assert reply.status_code == 403, path
        assert "needs a token of scope admin" in reply.text, path
    names = ["京东签到", "淘宝签到"]
    forged = [client.post("/ui/tasks/bulk", data={"csrf": csrf, "action": "delete",
                                                  "confirm": "yes", "names": names}),
              client.post("/ui/tasks/new", data={"csrf": csrf, "name": "伪造",
                                                 "command": "echo 伪造"}),
              client.post("/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/edit",
                          data={"csrf": csrf, "schedule": "@daily", "command": "echo x"})]
    assert [r.status_code for r in forged] == [403, 403, 403]
    off = client.post("/ui/tasks/bulk", data={"csrf": csrf, "action": "disable",
                                              "names": names})
    assert off.status_code == 303 and off.headers["location"] == "/ui/?done=2&failed=0"
    assert sorted(api.sql("SELECT name, enabled, deleted_at IS NULL, schedule FROM tasks")
                  ) == [("京东签到", False, True, None), ("淘宝签到", False, True, None)]


def test_the_backend_refuses_task_definitions_without_the_admin_scope(
        api: ApiWorld) -> None:
    from qinglong.control.panel_backend import ControlPanelBackend
    from qinglong.panel.backend import BackendRefusedError
    from qinglong.panel.security import Session, current_session

    backend = ControlPanelBackend(api.ctx)
    spec = {"name": "京东签到", "shell": "echo 京东"}
    for scope in ("viewer", "operator"):
        mark = current_session.set(Session("s", "c", can_write=scope != "viewer",
                                           actor=scope, scope=scope))
        try:
            with pytest.raises(BackendRefusedError) as refused:
                backend.task_add(spec)
            assert refused.value.code == "forbidden"
        finally:
            current_session.reset(mark)
    assert api.sql("SELECT count(*) FROM tasks") == [(0,)]


def test_admin_form_refusals_name_fields_in_zh_and_an_edit_keeps_a_secret(
        api: ApiWorld) -> None:
    client, csrf = _signed_in(api, "admin")
    form = {"csrf": csrf, "name": "京东签到", "schedule": "0 8 * * *",
            "timezone": "Asia/Shanghai", "command": "echo 京东", "labels": "平台=jd",
            "env": "1BAD=x", "attempts": "0", "secret_new": "JD_COOKIE=pt_key=秘密",
            "concurrency": "sometimes"}
    refused = client.post("/ui/tasks/new", data=form, headers={"Accept-Language": "zh-CN"})
    assert refused.status_code == 400
    text = refused.text
    assert "标签的 key 只能用" in text and "变量名只能用" in text and "不能小于 1" in text
    assert "请从列表中选择" in text
    assert "pt_key=秘密" not in text and "请重新输入" in text
    assert 'value="平台=jd"' in text and "1BAD=x</textarea>" in text
    assert api.sql("SELECT count(*) FROM tasks") == [(0,)]
    no_csrf = client.post("/ui/tasks/new", data={**form, "csrf": "", "concurrency": "forbid"})
    other_origin = client.post("/ui/tasks/new", data={**form, "concurrency": "forbid"},
                               headers={"Origin": "http://evil.example"})
    assert (no_csrf.status_code, other_origin.status_code) == (403, 403)
    assert api.sql("SELECT count(*) FROM tasks") == [(0,)]
    made = client.post("/ui/tasks/new", data={**form, "labels": "platform=jd",
                                              "env": "JD_NAME=京东", "attempts": "2",
                                              "concurrency": "forbid"})
    assert made.status_code == 303, made.text
    edit = client.get("/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/edit").text
    assert "JD_COOKIE" in edit and "pt_key" not in edit
    saved = client.post("/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/edit", data={
        "csrf": csrf, "schedule": "30 0 9 * * *", "timezone": "Asia/Shanghai",
        "command": "echo 京东", "labels": "platform=jd", "env": "JD_NAME=京东",
        "attempts": "2", "concurrency": "forbid", "secret_name": "JD_COOKIE"})
    assert saved.status_code == 303, saved.text
    assert api.sql("SELECT schedule, env->'JD_COOKIE', max_attempts, shell FROM tasks") == [
        ("30 0 9 * * *", {"value": "pt_key=秘密", "secret": True}, 2, "echo 京东")]
    events = api.sql("SELECT kind, detail->>'by' FROM task_events ORDER BY at, id")
    assert events == [("created", "admin-token"), ("edited", "admin-token")]


def test_runs_page_lists_across_tasks_filters_and_pages_by_keyset(api: ApiWorld) -> None:
    _make_task(api, "京东签到", concurrency_policy="allow")
    _make_task(api, "淘宝签到")
    jd = [_run(api, "京东签到") for _ in range(52)]  # one more than two pages of 50 hold
    tb = _run(api, "淘宝签到")
    api.sql("UPDATE runs SET status = 'failed', finished_at = now() WHERE id = %(r)s",
            {"r": jd[0]})
    client, _ = _signed_in(api, "viewer")
    first = client.get("/ui/runs")
    assert first.status_code == 200
    # newest first across tasks: 淘宝签到's run, then 京东签到's newest 49
    assert _run_ids(first.text) == [tb, *reversed(jd[3:])]
    assert "淘宝签到" in first.text and "京东签到" in first.text
    older = re.search(r'href="(/ui/runs\?before=[^"]+)"', first.text)
    assert older, first.text[-600:]
    second = client.get(older.group(1).replace("&amp;", "&")).text
    assert _run_ids(second) == list(reversed(jd[:3]))
    assert "/ui/runs?before=" not in second  # the last page offers no older one
    only = client.get("/ui/runs", params={"task": "淘宝签到"}).text
    assert _run_ids(only) == [tb]
    failed = client.get("/ui/runs", params={"status": "failed"}).text
    assert _run_ids(failed) == [jd[0]]
    both = client.get("/ui/runs", params={"task": "京东签到", "status": "queued"}).text
    assert len(_run_ids(both)) == 50 and jd[0] not in _run_ids(both)
    none = client.get("/ui/runs", params={"task": "没有这个任务"}).text
    assert _run_ids(none) == []
    junk = client.get("/ui/runs", params={"before": "不是游标"})  # a cursor not made by us
    assert junk.status_code == 200 and _run_ids(junk.text) == []
    assert _browser(api).get("/ui/runs").status_code == 401


def test_overview_counts_the_last_day_shows_failures_and_next_runs(api: ApiWorld) -> None:
    _make_task(api, "京东签到", schedule="0 8 * * *", timezone="Asia/Shanghai")
    _make_task(api, "淘宝签到", concurrency_policy="allow")
    old, failed, fresh = _run(api, "京东签到"), _run(api, "淘宝签到"), _run(api, "淘宝签到")
    api.sql("UPDATE runs SET status = 'failed', finished_at = now() WHERE id = %(r)s",
            {"r": failed})
    api.sql("UPDATE runs SET status = 'failed', finished_at = now() - interval '2 days',"
            " created_at = now() - interval '2 days' WHERE id = %(r)s", {"r": old})
    client, _ = _signed_in(api, "viewer")
    page = client.get("/ui/dashboard", headers={"Accept-Language": "zh-CN"})
    assert page.status_code == 200
    counts = re.findall(r'<p class="big[^"]*">(\d+)\+?</p>', page.text)
    assert counts == ["2", "1", "2"]  # runs in 24 h, failed in 24 h, tasks
    assert f"/ui/runs/{failed}" in page.text  # the failure of the last day is linked
    assert f"/ui/runs/{old}" not in page.text and f"/ui/runs/{fresh}" not in page.text
    upcoming = re.search(r"<ol>(.*?)</ol>", page.text, re.S)
    assert upcoming and "京东签到" in upcoming.group(1) and "Asia/Shanghai" in upcoming.group(1)
    assert "淘宝签到" not in upcoming.group(1)  # no schedule: no next run


def _values(api: ApiWorld) -> list[tuple[Any, ...]]:
    return api.sql("SELECT v.name, x.position, x.value, x.remark, x.enabled, v.secret"
                   " FROM global_variable_values x JOIN global_variables v USING (name)"
                   " ORDER BY v.name, x.position")


def test_variables_operator_writes_values_never_shown_pool_scope_shown(
        api: ApiWorld) -> None:
    scoped = api.client.post("/v1/vars/TB_REGION", json={
        "value": "华东", "remark": "淘宝地区", "secret": False, "pools": ["pool-a"]},
        headers=api.as_("operator"))
    assert scoped.status_code == 200, scoped.text
    client, csrf = _signed_in(api, "operator")
    for value, remark, another in (("pt_key=京东秘密一", "京东账号一", "off"),
                                   ("pt_key=京东秘密二", "京东账号二", "on")):
        saved = client.post("/ui/vars", data={
            "csrf": csrf, "action": "add", "name": "JD_COOKIE", "value": value,
            "remark": remark, "secret": "on", "another": another})
        assert saved.status_code == 303 and saved.headers["location"] == "/ui/vars"
    assert _values(api) == [
        ("JD_COOKIE", 1, "pt_key=京东秘密一", "京东账号一", True, True),
        ("JD_COOKIE", 2, "pt_key=京东秘密二", "京东账号二", True, True),
        ("TB_REGION", 1, "华东", "淘宝地区", True, False)]
    page = client.get("/ui/vars", headers={"Accept-Language": "zh-CN"}).text
    for shown in ("JD_COOKIE", "京东账号一", "京东账号二", "TB_REGION", "淘宝地区",
                  "执行池：pool-a", "所有执行池"):
        assert shown in page, shown
    for never in ("京东秘密", "华东", "/ui/vars/export-secrets"):
        assert never not in page, never  # no value on the page; secret export: admins'
    assert page.count("********") == 3 and "/ui/vars/export.txt" in page
    export = client.get("/ui/vars/export.txt")  # the plain variable's value only
    assert export.status_code == 200 and export.text == "# 淘宝地区\nTB_REGION=华东\n"
    off = client.post("/ui/vars", data={"csrf": csrf, "action": "disable",
                                        "name": "JD_COOKIE", "index": "1"})
    assert off.status_code == 303
    gone = client.post("/ui/vars", data={"csrf": csrf, "action": "delete",
                                         "name": "TB_REGION"})
    assert gone.status_code == 303
    bad = client.post("/ui/vars", data={"csrf": csrf, "action": "add", "name": "坏名字",
                                        "value": "x"})
    # refused with the rule it broke, the typed name kept in the form (not a redirect)
    assert bad.status_code == 400 and 'class="form-error var-refusal"' in bad.text
    assert 'value="坏名字"' in bad.text
    assert _values(api) == [
        ("JD_COOKIE", 1, "pt_key=京东秘密一", "京东账号一", False, True),
        ("JD_COOKIE", 2, "pt_key=京东秘密二", "京东账号二", True, True)]
    assert api.sql("SELECT updated_by FROM global_variables") == [("operator-token",)]


def test_secret_export_only_for_an_admin_who_confirms_the_backend_refuses_others(
        api: ApiWorld) -> None:
    from qinglong.control.panel_backend import ControlPanelBackend
    from qinglong.panel.backend import BackendRefusedError
    from qinglong.panel.security import Session, current_session

    for name, value, secret in (("JD_COOKIE", "pt_key=京东秘密", True),
                                ("TB_REGION", "华东", False)):
        stored = api.client.post(f"/v1/vars/{name}", json={
            "value": value, "remark": "账号", "secret": secret}, headers=api.as_("operator"))
        assert stored.status_code == 200, stored.text
    for scope in ("viewer", "operator"):
        client, csrf = _signed_in(api, scope)
        assert client.get("/ui/vars/export-secrets").status_code == 403
        forged = client.post("/ui/vars/export-secrets", data={"csrf": csrf, "confirm": "yes"})
        assert forged.status_code == 403 and "京东秘密" not in forged.text
        plain = client.get("/ui/vars/export.txt")
        assert plain.text == "# 账号\nTB_REGION=华东\n"
    # the backend itself gives secret values to an admin session only
    backend = ControlPanelBackend(api.ctx)
    for scope in ("viewer", "operator"):
        mark = current_session.set(Session("s", "c", can_write=scope != "viewer",
                                           actor=scope, scope=scope))
        try:
            with pytest.raises(BackendRefusedError) as refused:
                backend.vars_export(True)
            assert refused.value.code == "forbidden"
            assert [r["name"] for r in backend.vars_export(False)] == ["TB_REGION"]
        finally:
            current_session.reset(mark)

    client, csrf = _signed_in(api, "admin")
    page = client.get("/ui/vars/export-secrets", headers={"Accept-Language": "zh-CN"})
    assert page.status_code == 200 and "导出机密值" in page.text and "京东秘密" not in page.text
    unconfirmed = client.post("/ui/vars/export-secrets", data={"csrf": csrf})
    assert unconfirmed.status_code == 400 and "京东秘密" not in unconfirmed.text
    done = client.post("/ui/vars/export-secrets", data={"csrf": csrf, "confirm": "yes"})
    assert done.status_code == 200, done.text
    assert done.headers["content-disposition"] == 'attachment; filename="variables.env"'
    assert done.text == "# 账号\nJD_COOKIE=pt_key=京东秘密\n# 账号\nTB_REGION=华东\n"
    # an admin whose sign-in is older than 15 minutes signs in again first
    api.sql("UPDATE panel_sessions SET created_at = created_at - interval '16 minutes'")
    stale = client.post("/ui/vars/export-secrets", data={"csrf": csrf, "confirm": "yes"})
    assert stale.status_code == 401 and "京东秘密" not in stale.text


def test_variables_viewer_reads_names_and_flags_and_may_not_write(api: ApiWorld) -> None:
    stored = api.client.post("/v1/vars/JD_COOKIE", json={"value": "京东秘密",
                                                          "remark": "京东账号"},
                             headers=api.as_("operator"))
    assert stored.status_code == 200, stored.text
    client, csrf = _signed_in(api, "viewer")
    page = client.get("/ui/vars").text
    assert "JD_COOKIE" in page and "京东账号" in page and "京东秘密" not in page
    assert 'name="action"' not in page and "/ui/vars/import" not in page
    for data in ({"action": "add", "name": "JD_COOKIE", "value": "换掉"},
                 {"action": "delete", "name": "JD_COOKIE"}):
        forged = client.post("/ui/vars", data={"csrf": csrf, **data})
        assert forged.status_code == 403
    forged = client.post("/ui/vars/import", data={"csrf": csrf, "lines": "A=1"})
    assert forged.status_code == 403
    assert _values(api) == [("JD_COOKIE", 1, "京东秘密", "京东账号", True, True)]


def test_variables_writes_need_a_sign_in_within_15_minutes_by_the_database_clock(
        api: ApiWorld) -> None:
    client, csrf = _signed_in(api, "operator")
    api.sql("UPDATE panel_sessions SET created_at = now() - interval '16 minutes'")
    stale = client.post("/ui/vars", data={"csrf": csrf, "action": "add",
                                          "name": "JD_COOKIE", "value": "京东秘密"})
    assert stale.status_code == 401  # sign in again first
    assert _values(api) == []
    assert client.get("/ui/vars").status_code == 200  # reading needs no recent sign-in
    fresh, fresh_csrf = _signed_in(api, "operator")
    saved = fresh.post("/ui/vars", data={"csrf": fresh_csrf, "action": "add",
                                         "name": "JD_COOKIE", "value": "京东秘密"})
    assert saved.status_code == 303
    assert [r[:3] for r in _values(api)] == [("JD_COOKIE", 1, "京东秘密")]


def _incarnation(api: ApiWorld, name: str, labels: str, *, seen_ago_s: int = 0,
                 stopped: bool = False) -> str:
    """A worker incarnation of pool-a (labels ``{"zone": "a"}``) last heard from
    ``seen_ago_s`` seconds ago by the database's clock."""
    incarnation = uuid7()
    api.sql("INSERT INTO worker_incarnations (id, pool_id, name, labels, concurrency,"
            " last_seen_at, stopped_at) SELECT %(i)s, id, %(n)s, %(l)s, 3,"
            " now() - make_interval(secs => %(s)s), CASE WHEN %(x)s THEN now() END"
            " FROM worker_pools WHERE name = 'pool-a'",
            {"i": incarnation, "n": name, "l": labels, "s": seen_ago_s, "x": stopped})
    return incarnation


def test_workers_page_shows_pools_workers_not_stopped_and_tasks_no_live_worker_runs(
        api: ApiWorld) -> None:
    api.ctx.lease_ms = 30_000
    _make_task(api, "华东任务", {"zone": "a"})
    _make_task(api, "华北任务", {"zone": "b"})  # no worker declares zone=b
    _make_task(api, "无标签任务")  # any live worker may run it
    live = _incarnation(api, "节点-甲", '{"zone": "a"}')
    _incarnation(api, "节点-乙", '{"zone": "a"}', seen_ago_s=3600)  # silent
    _incarnation(api, "节点-丙", '{"zone": "a"}', stopped=True)
    client, _csrf_token = _signed_in(api, "viewer")
    page = client.get("/ui/workers")
    assert page.status_code == 200, page.text
    html = page.text
    assert "pool-a" in html and "节点-甲" in html and "节点-乙" in html
    assert "节点-丙" not in html  # stopped: gone from the page
    assert "失联" in html and "1 小时前" in html and "0 / 3" in html
    unmatched = html.split('id="unmatched"', 1)[1]
    assert "华北任务" in unmatched and "华东任务" not in unmatched
    assert "无标签任务" not in unmatched
    tasks = client.get("/ui/").text
    rows = {name: tasks.split(name, 1)[1].split("</td>", 1)[0]
            for name in ("华东任务", "华北任务", "无标签任务")}
    assert ["没有匹配标签的在线节点" in rows[n] for n in ("华东任务", "华北任务", "无标签任务")
            ] == [False, True, False]
    # the only live worker stops: nothing is live, so every task waits
    api.sql("UPDATE worker_incarnations SET stopped_at = now() WHERE id = %(i)s",
            {"i": live})
    html = client.get("/ui/workers").text
    assert "没有在线的执行节点" in html
    for name in ("华东任务", "华北任务", "无标签任务"):
        assert name in html.split('id="unmatched"', 1)[1]


def test_occurrences_page_reads_the_ledger_newest_first_with_runs_linked(
        api: ApiWorld) -> None:
    from qinglong.control.panel_backend import ControlPanelBackend
    from qinglong.panel.backend import BackendRefusedError

    _make_task(api, "京东签到", schedule="0 8 * * *", timezone="Asia/Shanghai")
    run_id = _run(api, "京东签到")
    [(task_id,)] = api.sql("SELECT id::text FROM tasks WHERE name = '京东签到'")
    rows = [("run_created", "2026-11-29 00:00:00+00", "2026-11-29 00:00:00+00", 1, run_id),
            ("skipped_active", "2026-11-30 00:00:00+00", "2026-11-30 00:00:00+00", 1, None),
            ("skipped_downtime", "2026-12-01 00:00:00+00", "2026-12-03 00:00:00+00", 3,
             None)]
    for outcome, first, last, count, run in rows:
        api.sql("INSERT INTO occurrences (id, task_id, outcome, first_slot, last_slot,"
                " slot_count, run_id) VALUES (%(i)s, %(t)s, %(o)s, %(f)s, %(l)s, %(c)s,"
                " %(r)s)", {"i": uuid7(), "t": task_id, "o": outcome, "f": first,
                            "l": last, "c": count, "r": run})
    client, _csrf_token = _signed_in(api, "viewer")
    html = client.get("/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/occurrences").text
    assert "京东签到 的调度记录" in html
    # newest first, in the task's zone (00:00 UTC is 08:00 in Shanghai)
    order = [html.index(t) for t in ("2026-12-01 08:00:00", "2026-11-30 08:00:00",
                                     "2026-11-29 08:00:00")]
    assert order == sorted(order)
    assert "2026-12-03 08:00:00" in html and "3 个时刻" in html
    assert f'href="/ui/runs/{run_id}"' in html and "运行 #1" in html
    assert "已跳过：上一次运行仍在进行（并发策略 forbid）" in html
    assert 'href="/ui/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/occurrences"' in (
        client.get("/ui/").text)
    backend = ControlPanelBackend(api.ctx)
    seen, cursor = [], None
    while True:  # keyset pages of one row never repeat or skip one
        page = backend.occurrences_page("京东签到", cursor, 1)
        seen += [item["outcome"] for item in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == ["skipped_downtime", "skipped_active", "run_created"]
    with pytest.raises(BackendRefusedError) as bad:
        backend.occurrences_page("京东签到", "not-a-cursor", 10)
    assert bad.value.usage
    with pytest.raises(BackendRefusedError) as missing:
        backend.occurrences_page("没有这个任务", None, 10)
    assert missing.value.code == "not_found"
def test_bundle_removal_needs_an_admin_session_and_no_task_using_it(api: ApiWorld) -> None:
    """The backend itself (not only the page) refuses an operator's removal, and an
    admin's while a live task names the bundle; the row stays until then."""
    from qinglong.control.bundles import records
    from qinglong.control.panel_backend import ControlPanelBackend
    from qinglong.panel.backend import BackendRefusedError
    from qinglong.panel.security import Session, current_session
    from qinglong.shared.bundles import Manifest, Member

    digest = "ab" * 32
    with api.engine.begin() as conn:
        records.record(conn, digest, 100, Manifest(
            (Member("签到.sh", "file", 10, 0o644),), 10), "测试")
    _make_task(api, "包任务", bundle_digest=digest, entry_point="签到.sh", shell=None)
    backend = ControlPanelBackend(api.ctx)
    shown = backend.bundle_show(digest)
    assert shown["used_by_tasks"] == ["包任务"] and shown["members"][0]["path"] == "签到.sh"
    assert [b["used_by"] for b in backend.bundles_list()["bundles"]] == [1]

    def remove_as(scope: str) -> str:
        token = current_session.set(Session("s", "c", can_write=scope != "viewer",
                                            actor=f"{scope}-token", scope=scope))
        try:
            backend.bundle_remove(digest)
        except BackendRefusedError as exc:
            return exc.code
        finally:
            current_session.reset(token)
        return "removed"

    assert remove_as("viewer") == "forbidden"
    assert remove_as("operator") == "forbidden"
    assert remove_as("admin") == "bundle_in_use"
    assert api.sql("SELECT count(*) FROM script_bundles") == [(1,)]
    gone = api.client.delete("/v1/tasks/%E5%8C%85%E4%BB%BB%E5%8A%A1", headers=api.as_("admin"))
    assert gone.status_code in (200, 204), gone.text
    assert remove_as("admin") == "removed"
    assert api.sql("SELECT count(*) FROM script_bundles") == [(0,)]
