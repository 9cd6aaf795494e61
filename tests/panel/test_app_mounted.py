"""The panel mounted under a prefix with a token sign-in store, as control serves it at
``/ui`` (docs/panel.md "Cluster"), over fakes of its ports: links and redirects carry the
mount, the token form, 403 for a refused token and 429 with Retry-After when throttled,
a read-only session sees no write controls and its forged writes get 403, sign-out, Stop,
and the log stream ending once its session is gone; the optional pages a profile does not
serve are hidden and answer 501, and the local profile's pages keep the mount in every link
(docs/panel.md "Backends"). The real store and backend run against PostgreSQL in
integration/control/test_panel_cluster.py."""

from __future__ import annotations

import secrets
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette's TestClient prefers httpx2; httpx is installed
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from starlette.applications import Starlette
from starlette.routing import Mount

from qinglong.panel.app import create_app
from qinglong.panel.backend import FEATURES
from qinglong.panel.security import (
    Session,
    Sessions,
    SignInRefusedError,
    SignInThrottledError,
    current_session,
)

BASE = "http://testserver"
JD = "%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0"  # 京东签到


class TokenStore:
    """The shape of control's PanelSessionStore, in memory."""

    token_sign_in = True

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.throttled = False

    def sign_in(self, token: str, client: str) -> Session:
        if self.throttled:
            raise SignInThrottledError(42)
        if token not in ("ql3_operator", "ql3_viewer"):
            raise SignInRefusedError
        session = Session(secrets.token_urlsafe(16), secrets.token_urlsafe(32),
                          can_write=token == "ql3_operator", actor=token[4:],
                          scope=token[4:])
        self.sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        return self.sessions.get(session_id or "")

    def sign_out(self, session_id: str | None) -> None:
        self.sessions.pop(session_id or "", None)


class Backend:
    profile = "cluster"
    features: frozenset[str] = frozenset()  # a profile without any optional page

    def __init__(self, store: TokenStore) -> None:
        self.store = store
        self.calls: list[tuple[str, Any]] = []

    def available(self) -> bool:
        return True

    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        task = {"name": "京东签到", "labels": ["platform=jd"], "schedule": "0 8 * * *",
                "timezone": "Asia/Shanghai", "next_fire": None,
                "last_run": {"id": "r1", "status": "running", "finished_at": None},
                "enabled": True}
        return {"tasks": [task], "total": 1, "offset": offset, "limit": limit}

    def run_now(self, task: str) -> dict[str, Any]:
        session = current_session.get()
        self.calls.append(("run_now", (task, session.actor if session else None)))
        return {"id": "r2", "status": "queued"}

    def set_enabled(self, task: str, enabled: bool) -> dict[str, Any]:
        self.calls.append(("set_enabled", (task, enabled)))
        return {"name": task, "enabled": enabled}

    def cancel_run(self, run: str) -> dict[str, Any]:
        self.calls.append(("cancel_run", run))
        return {"id": run, "status": "running"}

    def run_get(self, run: str) -> dict[str, Any]:
        return {"id": run, "task_name": "京东签到", "status": "running", "attempts": []}

    def log_wait(self, run: str, offset: int, timeout_s: float,
                 attempt: int | None = None) -> dict[str, Any]:
        self.calls.append(("log_wait", offset))
        if len(self.calls) >= 2:  # the token is revoked while the stream is open
            self.store.sessions.clear()
        return {"data": "", "offset": offset, "done": False, "run_status": "running"}

    def log_read(self, run: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
        return {"data": "", "offset": offset, "done": True, "run_status": "running"}


@pytest.fixture
def store() -> TokenStore:
    return TokenStore()


@pytest.fixture
def backend(store: TokenStore) -> Backend:
    return Backend(store)


@pytest.fixture
def client(backend: Backend, store: TokenStore) -> TestClient:
    app = Starlette(routes=[Mount("/ui", create_app(backend, store))])
    return TestClient(app, base_url=BASE, headers={"Origin": BASE})


def _sign_in(client: TestClient, token: str) -> str:
    reply = client.post("/ui/signin", data={"token": token}, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == "/ui/"
    assert "Path=/ui" in reply.headers["set-cookie"]
    page = client.get("/ui/").text
    return page.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_the_token_form_signs_in_and_every_link_carries_the_mount(client: TestClient) -> None:
    form = client.get("/ui/")
    assert form.status_code == 401 and 'action="/ui/signin"' in form.text
    assert 'id="token"' in form.text and 'href="/ui/static/panel.css"' in form.text
    _sign_in(client, "ql3_operator")
    page = client.get("/ui/").text
    assert f'action="/ui/tasks/{JD}/run"' in page and 'href="/ui/runs/r1"' in page
    assert 'action="/ui/signout"' in page and 'hx-get="/ui/"' in page
    run = client.get("/ui/runs/r1").text
    assert 'data-stream="/ui/runs/r1/log/stream"' in run and 'action="/ui/runs/r1/stop"' in run


def test_a_wrong_token_is_403_and_a_throttled_address_429(
        client: TestClient, store: TokenStore) -> None:
    wrong = client.post("/ui/signin", data={"token": "ql3_guess"}, follow_redirects=False)
    assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
    assert "ql3_guess" not in wrong.text
    store.throttled = True
    slow = client.post("/ui/signin", data={"token": "ql3_operator"}, follow_redirects=False)
    assert slow.status_code == 429 and slow.headers["retry-after"] == "42"
    no_origin = client.post("/ui/signin", data={"token": "ql3_operator"},
                            headers={"Origin": "http://evil.example"})
    assert no_origin.status_code == 403


def test_read_only_session_has_no_write_controls_and_forged_writes_get_403(
        client: TestClient, backend: Backend) -> None:
    csrf = _sign_in(client, "ql3_viewer")
    page = client.get("/ui/").text
    assert "京东签到" in page and f"/tasks/{JD}/run" not in page and "/disable" not in page
    assert "/stop" not in client.get("/ui/runs/r1").text
    for path in (f"/ui/tasks/{JD}/run", f"/ui/tasks/{JD}/disable", "/ui/runs/r1/stop"):
        assert client.post(path, data={"csrf": csrf}).status_code == 403
    assert backend.calls == []
    out = client.post("/ui/signout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303 and out.headers["location"] == "/ui/signin"


def test_operator_writes_as_itself_stops_runs_and_signs_out(
        client: TestClient, backend: Backend, store: TokenStore) -> None:
    csrf = _sign_in(client, "ql3_operator")
    ran = client.post(f"/ui/tasks/{JD}/run", data={"csrf": csrf}, follow_redirects=False)
    assert ran.status_code == 303 and ran.headers["location"] == "/ui/runs/r2"
    stop = client.post("/ui/runs/r2/stop", data={"csrf": csrf}, follow_redirects=False)
    assert stop.status_code == 303 and stop.headers["location"] == "/ui/runs/r2"
    assert backend.calls == [("run_now", ("京东签到", "operator")), ("cancel_run", "r2")]
    assert client.post("/ui/signout", follow_redirects=False).status_code == 403  # no CSRF
    assert client.post("/ui/signout", data={"csrf": csrf},
                       follow_redirects=False).status_code == 303
    assert store.sessions == {} and client.get("/ui/").status_code == 401


def test_the_log_stream_ends_at_the_beat_after_its_session_is_gone(
        client: TestClient, backend: Backend) -> None:
    _sign_in(client, "ql3_operator")
    body = client.get("/ui/runs/r1/log/stream").text
    assert body.count(": waiting") == 2 and body.endswith("event: unavailable\ndata: {}\n\n")
    assert [c for c in backend.calls if c[0] == "log_wait"] == [("log_wait", 0)] * 2


def test_local_sessions_sign_out() -> None:
    sessions = Sessions("one-time")
    session = sessions.redeem("one-time")
    assert session is not None and sessions.get(session.id) == session
    sessions.sign_out(session.id)
    assert sessions.get(session.id) is None


NOT_IN_PROFILE = "此页面在当前部署方式中尚不可用"  # the zh-CN catalog's error.not_in_profile


def test_pages_the_cluster_does_not_serve_are_hidden_and_answer_501(
        client: TestClient, backend: Backend) -> None:
    csrf = _sign_in(client, "ql3_operator")
    page = client.get("/ui/").text
    for hidden in ('href="/ui/runs"', 'href="/ui/vars"', 'href="/ui/dashboard"',
                   "/ui/tasks/new", "/edit", "?copy=", "/delete", 'value="delete"'):
        assert hidden not in page, hidden
    assert 'action="/ui/tasks/bulk"' in page and 'value="disable"' in page
    for path in ("/ui/runs", "/ui/vars", "/ui/vars/export.txt", "/ui/dashboard",
                 "/ui/tasks/new", f"/ui/tasks/{JD}/edit", f"/ui/tasks/{JD}/delete",
                 "/ui/tasks/preview?schedule=*+*+*+*+*&timezone=UTC"):
        reply = client.get(path)
        assert reply.status_code == 501 and NOT_IN_PROFILE in reply.text, path
    for path, data in (("/ui/tasks/new", {"name": "x", "schedule": "@daily"}),
                       ("/ui/vars", {"action": "add", "name": "UA", "value": "x"}),
                       ("/ui/tasks/bulk", {"action": "delete", "names": "京东签到",
                                           "confirm": "yes"})):
        reply = client.post(path, data={"csrf": csrf, **data})
        assert reply.status_code == 501 and NOT_IN_PROFILE in reply.text, path
    assert backend.calls == []
    bulk = client.post("/ui/tasks/bulk", data={"csrf": csrf, "action": "run",
                                               "names": "京东签到"}, follow_redirects=False)
    assert bulk.status_code == 303 and bulk.headers["location"] == "/ui/?done=1&failed=0"
    assert backend.calls == [("run_now", ("京东签到", "operator"))]


def test_the_bulk_bar_and_row_checkboxes_are_for_sessions_that_may_write(
        backend: Backend, store: TokenStore) -> None:
    app = Starlette(routes=[Mount("/ui", create_app(backend, store))])
    shown = {}
    for token in ("ql3_viewer", "ql3_operator"):
        client = TestClient(app, base_url=BASE, headers={"Origin": BASE})
        _sign_in(client, token)
        page = client.get("/ui/").text
        assert "京东签到" in page
        shown[token] = ("/tasks/bulk" in page, 'form="bulk"' in page)
    assert shown == {"ql3_viewer": (False, False), "ql3_operator": (True, True)}


class LocalPages(Backend):
    """The local profile's optional pages, with one task, one run and one variable."""

    profile = "local"
    features = FEATURES

    def runs_page(self, task: str | None, status: str | None, before: str | None,
                  limit: int) -> dict[str, Any]:
        run = {"id": "r1", "number": 3, "task": "京东签到", "status": "failed",
               "trigger": "manual", "created_at": "2999-01-01T00:00:00Z",
               "finished_at": None}
        return {"runs": [run], "next": "r1"}

    def task_get(self, name: str) -> dict[str, Any]:
        return {"name": name, "argv": ["echo", "hi"], "schedule": "0 8 * * *",
                "timezone": "Asia/Shanghai", "env": {}, "timeout_s": None,
                "max_attempts": 1, "concurrency": "forbid", "labels": [],
                "secret_env": {}}

    def schedule_preview(self, schedule: str, timezone: str, count: int) -> dict[str, Any]:
        return {"slots": []}

    def vars_list(self) -> list[dict[str, Any]]:
        return [{"name": "UA", "secret": False, "source": "manual", "enabled": 1,
                 "values": [{"index": 1, "remark": "", "enabled": True,
                             "updated_at": None}]}]

    def vars_reveal(self, name: str) -> dict[str, Any]:
        view = self.vars_list()[0]
        view["values"][0]["value"] = "浏览器"
        return view


def test_the_local_pages_under_a_mount_keep_it_in_every_link_and_form() -> None:
    sessions = Sessions("one-time")
    app = Starlette(routes=[Mount("/ui", create_app(LocalPages(TokenStore()), sessions))])
    client = TestClient(app, base_url=BASE, headers={"Origin": BASE})
    assert client.get("/ui/signin?token=one-time",
                      follow_redirects=False).headers["location"] == "/ui/"
    pages = {path: client.get(path) for path in (
        "/ui/", "/ui/runs", "/ui/vars", "/ui/dashboard", "/ui/tasks/new",
        f"/ui/tasks/{JD}/edit", f"/ui/tasks/{JD}/delete")}
    assert {path: reply.status_code for path, reply in pages.items()} == dict.fromkeys(
        pages, 200)
    every = "".join(reply.text for reply in pages.values())
    for wanted in ('href="/ui/runs"', 'href="/ui/vars"', 'href="/ui/dashboard"',
                   'href="/ui/tasks/new"', f'href="/ui/tasks/{JD}/edit"',
                   'action="/ui/tasks/bulk"', 'action="/ui/runs"', 'href="/ui/runs/r1"',
                   'href="/ui/runs?before=r1"', 'action="/ui/vars"', 'action="/ui/vars/import"',
                   'href="/ui/vars/export.txt"', 'action="/ui/tasks/new"',
                   f'action="/ui/tasks/{JD}/edit"', 'hx-get="/ui/tasks/preview"',
                   'href="/ui/runs?status=failed"'):
        assert wanted in every, wanted
    for tag in ('href="/', 'action="/', 'hx-get="/', 'src="/'):
        for rest in every.split(tag)[1:]:
            assert rest.startswith("ui/"), tag + rest[:40]
