"""The panel application over a small fake of its PanelBackend port (docs/panel.md):
sign-in by the one-time link, session cookie flags, CSRF and Origin on state changes,
security headers, escaping, the owner-down page, the log stream's event ids."""

from __future__ import annotations

import json
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette's TestClient prefers httpx2; httpx is installed
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from qinglong.panel.app import create_app
from qinglong.panel.backend import FEATURES, BackendRefusedError, BackendUnavailableError
from qinglong.panel.security import Sessions

BASE = "http://testserver"
EVIL = "<script>alert(1)</script>"


class FakeBackend:
    profile = "local"
    features = FEATURES

    def __init__(self) -> None:
        self.up = True
        self.calls: list[tuple[str, Any]] = []
        self.log = f"第一行\n{EVIL}\n".encode()

    def _check(self) -> None:
        if not self.up:
            raise BackendUnavailableError("no owner")

    def available(self) -> bool:
        return self.up

    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        self._check()
        tasks = [{"name": "京东签到", "labels": ["签到", EVIL], "schedule": "0 8 * * *",
                  "timezone": "Asia/Shanghai", "next_fire": "2026-12-03T00:00:00Z",
                  "last_run": None, "enabled": True},
                 {"name": EVIL, "labels": [], "schedule": None, "timezone": "UTC",
                  "next_fire": None, "last_run": {"id": "r1", "status": "failed",
                                                  "finished_at": "x"}, "enabled": False}]
        tasks = [t for t in tasks if query in t["name"]]
        return {"tasks": tasks[offset:offset + limit], "total": len(tasks), "offset": offset,
                "limit": limit}

    def run_now(self, task: str) -> dict[str, Any]:
        self._check()
        self.calls.append(("run_now", task))
        if task != "京东签到":
            raise BackendRefusedError("not_found", "no such task", usage=True)
        return {"id": "0190-run", "status": "queued"}

    def set_enabled(self, task: str, enabled: bool) -> dict[str, Any]:
        self._check()
        self.calls.append(("set_enabled", (task, enabled)))
        return {"name": task, "enabled": enabled}

    def run_get(self, run: str) -> dict[str, Any]:
        self._check()
        return {"id": run, "task": "京东签到", "status": "succeeded", "attempts": []}

    def log_read(self, run: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
        data = self.log[offset:]
        return {"data": data.decode(), "offset": offset + len(data), "done": True,
                "run_status": "succeeded"}

    def log_wait(self, run: str, offset: int, timeout_s: float,
                 attempt: int | None = None) -> dict[str, Any]:
        self.calls.append(("log_wait", offset))
        return self.log_read(run, offset, attempt)


@pytest.fixture
def backend() -> FakeBackend:
    return FakeBackend()


@pytest.fixture
def client(backend: FakeBackend) -> TestClient:
    return TestClient(create_app(backend, Sessions("one-time")), base_url=BASE)


def _signed_in(client: TestClient) -> str:
    reply = client.get("/signin?token=one-time", follow_redirects=False)
    assert reply.status_code == 303
    page = client.get("/")
    marker = 'name="csrf" value="'
    return page.text.split(marker, 1)[1].split('"', 1)[0]


def test_pages_need_the_one_time_link_and_it_works_once(client: TestClient) -> None:
    assert client.get("/").status_code == 401
    assert "ql3 local web" in client.get("/").text
    reply = client.get("/signin?token=one-time", follow_redirects=False)
    cookie = reply.headers["set-cookie"]
    assert "ql3_session=" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert client.get("/").status_code == 200
    other = TestClient(client.app, base_url=BASE)
    assert other.get("/signin?token=one-time").status_code == 403  # used up
    assert other.get("/signin?token=guess").status_code == 403


def test_every_response_carries_the_security_headers(client: TestClient) -> None:
    for reply in (client.get("/"), client.get("/static/panel.css"),
                  client.get("/static/vendor/htmx.min.js")):
        assert reply.headers["content-security-policy"] == (
            "default-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "same-origin"


def test_tasks_page_is_chinese_by_default_and_escapes_task_data(client: TestClient) -> None:
    _signed_in(client)
    page = client.get("/").text
    assert '<html lang="zh-CN">' in page and "京东签到" in page and "定时规则" in page
    assert EVIL not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "Asia/Shanghai" in page
    english = client.get("/", headers={"Accept-Language": "en-US"}).text
    assert '<html lang="en">' in english and "Schedule" in english


def test_a_state_change_without_csrf_or_origin_is_refused(
        client: TestClient, backend: FakeBackend) -> None:
    csrf = _signed_in(client)
    path = "/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/run"
    assert client.post(path, follow_redirects=False).status_code == 403
    assert client.post(path, data={"csrf": "wrong"}, headers={"Origin": BASE},
                       follow_redirects=False).status_code == 403
    assert client.post(path, data={"csrf": csrf}, headers={"Origin": "http://evil.example"},
                       follow_redirects=False).status_code == 403
    assert client.post(path, data={"csrf": csrf}, follow_redirects=False).status_code == 403
    assert backend.calls == []
    ok = client.post(path, data={"csrf": csrf}, headers={"Origin": BASE},
                     follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"] == "/runs/0190-run"
    assert backend.calls == [("run_now", "京东签到")]
    header = client.post("/tasks/x/disable", headers={"Origin": BASE, "X-CSRF-Token": csrf},
                         follow_redirects=False)
    assert header.status_code == 303 and backend.calls[-1] == ("set_enabled", ("x", False))


def test_without_an_owner_every_page_says_start_serve(
        client: TestClient, backend: FakeBackend) -> None:
    _signed_in(client)
    backend.up = False
    for path in ("/", "/runs/r1"):
        reply = client.get(path)
        assert reply.status_code == 503 and "<code>ql3 local serve</code>" in reply.text
        assert "`" not in reply.text.split("<main", 1)[-1]  # no markdown backticks shown


def test_log_stream_ids_are_byte_offsets_and_resume_from_last_event_id(
        client: TestClient, backend: FakeBackend) -> None:
    _signed_in(client)
    body = client.get("/runs/r1/log/stream").text
    assert f"id: 1:{len(backend.log)}\n" in body and "event: end" in body
    assert EVIL in body  # as JSON text; the viewer escapes it (integration/panel)
    again = client.get("/runs/r1/log/stream", headers={"Last-Event-ID": "1:10"})
    assert ("log_wait", 10) in backend.calls
    assert "第一行" not in again.text
    assert client.get("/runs/r1/log.txt").content == backend.log


def test_language_switch_is_remembered(client: TestClient) -> None:
    csrf = _signed_in(client)
    client.post("/lang?next=/", data={"csrf": csrf, "lang": "en"}, headers={"Origin": BASE})
    assert '<html lang="en">' in client.get("/").text


class ManyTasks(FakeBackend):
    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        self.calls.append(("task_page", (offset, limit, query)))
        names = [f"task-{i:03d}" for i in range(120)]
        rows = [{"name": n, "labels": [], "schedule": "0 8 * * *", "timezone": "UTC",
                 "next_fire": None, "last_run": None, "enabled": True}
                for n in names[offset:offset + limit]]
        return {"tasks": rows, "total": 120, "offset": offset, "limit": limit}


def test_the_task_list_is_paged_by_the_server() -> None:
    backend = ManyTasks()
    client = TestClient(create_app(backend, Sessions("one-time")), base_url=BASE)
    _signed_in(client)
    page = client.get("/?offset=50&q=task").text
    assert backend.calls[-1] == ("task_page", (50, 50, "task"))
    assert "task-050" in page and "task-099" in page and "task-100" not in page
    assert "第 51–100 条，共 120 条" in page
    assert "offset=0" in page and "offset=100" in page  # previous and next
    partial = client.get("/?offset=100", headers={"HX-Request": "true"}).text
    assert "<html" not in partial and "第 101–120 条，共 120 条" in partial


@pytest.mark.parametrize("target", ["//evil.example/", "/\\evil.example/", "https://evil.example/"])
def test_after_a_form_the_panel_never_redirects_off_site(client: TestClient, target: str) -> None:
    csrf = _signed_in(client)
    reply = client.post("/tasks/x/enable", params={"next": target}, data={"csrf": csrf},
                        headers={"Origin": BASE}, follow_redirects=False)
    assert reply.status_code == 303 and reply.headers["location"] == "/"


class CappedLog(FakeBackend):
    """A log the cap cut (docs/protocols.md §3.8): head 0..5, 100 raw bytes left out, tail."""

    def log_read(self, run: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
        if offset < 5:
            return {"data": "head\n"[offset:], "offset": 5, "done": False,
                    "run_status": "succeeded"}
        if offset < 105:
            return {"data": "", "offset": 105, "gap": 105 - offset, "done": False,
                    "run_status": "succeeded"}
        data = "tail\n"[offset - 105:]
        return {"data": data, "offset": offset + len(data), "done": True,
                "run_status": "succeeded"}


def test_a_capped_log_streams_a_gap_event_and_downloads_the_notice() -> None:
    client = TestClient(create_app(CappedLog(), Sessions("one-time")), base_url=BASE)
    _signed_in(client)
    body = client.get("/runs/r1/log/stream").text
    assert "event: gap\nid: 1:105\ndata: 100\n" in body
    assert body.index("head") < body.index("event: gap") < body.index("tail")
    assert "event: end" in body
    whole = client.get("/runs/r1/log.txt").text
    assert whole == "head\n[ql3: 100 bytes of output left out here by the log cap]\ntail\n"


class RetriedLog(FakeBackend):
    """A run whose attempt 1 failed and attempt 2 succeeded; attempt None is attempt 1, the
    newest when the page opened (docs/panel.md "Run detail")."""

    logs = {1: "第一次尝试 失败\n".encode(), 2: "重试成功\n".encode()}

    def log_read(self, run: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
        number = attempt or 1
        data = self.logs[number][offset:]
        return {"data": data.decode(), "offset": offset + len(data), "attempt": number,
                "attempts": 2, "done": number == 2 and not data, "run_status": "succeeded"}


def test_the_stream_follows_a_retry_and_a_pinned_stream_shows_one_attempt() -> None:
    client = TestClient(create_app(RetriedLog(), Sessions("one-time")), base_url=BASE)
    _signed_in(client)
    body = client.get("/runs/r1/log/stream").text
    first, second = len(RetriedLog.logs[1]), len(RetriedLog.logs[2])
    assert (body.index(f"id: 1:{first}\n") < body.index("event: attempt\nid: 2:0\ndata: 2\n")
            < body.index(f"id: 2:{second}\n") < body.index("event: end"))
    first_text, second_text = (json.dumps(RetriedLog.logs[n].decode()) for n in (1, 2))
    resumed = client.get("/runs/r1/log/stream", headers={"Last-Event-ID": "2:0"}).text
    assert first_text not in resumed and second_text in resumed  # resumes in attempt 2
    pinned = client.get("/runs/r1/log/stream?attempt=1").text
    assert first_text in pinned and second_text not in pinned
    assert "event: attempt" not in pinned and "event: end" in pinned
    assert client.get("/runs/r1/log.txt?attempt=1").content == RetriedLog.logs[1]
    page = client.get("/runs/r1?attempt=1").text
    assert 'data-stream="/runs/r1/log/stream?attempt=1"' in page and 'data-pinned="1"' in page
