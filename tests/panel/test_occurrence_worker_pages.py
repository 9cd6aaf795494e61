"""The Occurrences and Workers pages (docs/panel.md "Pages") over a fake of the panel's
PanelBackend port: the timeline in the task's zone with runs linked and skips explained,
its keyset pager, escaping, the Tasks page's link and no-worker warning, the Workers page's
rows, a profile without workers hiding the page (501), and a read-only sign-in seeing both.
The real backends run in integration/panel (browser) and integration/control."""

from __future__ import annotations

import secrets
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette's TestClient prefers httpx2; httpx is installed
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from qinglong.panel.app import create_app
from qinglong.panel.backend import FEATURES, BackendRefusedError, NotInProfileError
from qinglong.panel.security import Session, SignInRefusedError
from qinglong.panel.worker_pages import ago

BASE = "http://testserver"
JD = "京东签到"
EVIL = "<img src=x onerror=alert(1)>"  # no "/": a name in one path segment


class Store:
    """A token sign-in store (control's shape): ``ql3_viewer`` reads, ``ql3_operator``
    writes."""

    token_sign_in = True

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}

    def sign_in(self, token: str, client: str) -> Session:
        if token not in ("ql3_operator", "ql3_viewer"):
            raise SignInRefusedError
        session = Session(secrets.token_urlsafe(16), secrets.token_urlsafe(32),
                          can_write=token == "ql3_operator", actor=token[4:])
        self.sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        return self.sessions.get(session_id or "")

    def sign_out(self, session_id: str | None) -> None:
        self.sessions.pop(session_id or "", None)


OCCURRENCES = [
    {"id": "o4", "outcome": "skipped_downtime", "reason": "misfire",
     "first_slot": "2026-12-01T00:00:00Z", "last_slot": "2026-12-02T00:00:00Z",
     "slot_count": 2, "at_least": False, "run": None, "recorded_at": "2026-12-02T01:00:00Z"},
    {"id": "o3", "outcome": "backlog_full", "reason": None,
     "first_slot": "2026-11-30T00:00:00Z", "last_slot": "2026-11-30T00:00:00Z",
     "slot_count": 1, "at_least": False, "run": None, "recorded_at": "2026-11-30T00:00:00Z"},
    {"id": "o2", "outcome": "run_created", "reason": None,
     "first_slot": "2026-11-29T00:00:00Z", "last_slot": "2026-11-29T00:00:00Z",
     "slot_count": 1, "at_least": False,
     "run": {"id": "run-7", "number": 7, "status": "succeeded"},
     "recorded_at": "2026-11-29T00:00:00Z"},
]


class Backend:
    profile = "cluster"

    def __init__(self, features: frozenset[str]) -> None:
        self.features = features
        self.asked: list[tuple[str, str | None]] = []

    def available(self) -> bool:
        return True

    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        tasks = [{"name": JD, "labels": ["platform=jd"], "schedule": "0 8 * * *",
                  "timezone": "Asia/Shanghai", "next_fire": None, "last_run": None,
                  "enabled": True, "no_worker": True},
                 {"name": "每日备份", "labels": [], "schedule": "0 3 * * *",
                  "timezone": "UTC", "next_fire": None, "last_run": None, "enabled": True,
                  "no_worker": False}]
        return {"tasks": tasks, "total": 2, "offset": offset, "limit": limit}

    def occurrences_page(self, task: str, before: str | None, limit: int) -> dict[str, Any]:
        self.asked.append((task, before))
        if task not in (JD, EVIL):
            raise BackendRefusedError("not_found", "no live task has this name", usage=True)
        items = OCCURRENCES if before is None else OCCURRENCES[1:]
        return {"task": {"name": task, "schedule": "0 8 * * *", "timezone": "Asia/Shanghai",
                         "enabled": True},
                "items": items, "next": "o2" if before is None else None}

    def workers_page(self, before: str | None, limit: int) -> dict[str, Any]:
        if "workers" not in self.features:
            raise NotInProfileError("workers")
        return {"pools": [{"name": "默认池", "labels": ["platform=jd"], "live": 1}],
                "workers": [{"id": "w1", "name": "节点-甲", "pool": "默认池",
                             "labels": ["platform=jd", "zone=a"], "concurrency": 4,
                             "state": "live", "started_at": "2026-12-02T00:00:00+00:00",
                             "last_seen_at": "2026-12-02T03:04:05.123+00:00",
                             "seen_s": 125.4, "attempts_held": 1}],
                "next": None, "live": 1,
                "unmatched": [{"name": JD, "labels": ["platform=tb"]}],
                "unmatched_total": 3}


def _client(backend: Backend, token: str, lang: str = "zh-CN") -> TestClient:
    client = TestClient(create_app(backend, Store()), base_url=BASE,
                        headers={"Accept-Language": lang})
    reply = client.post("/signin", data={"token": token}, headers={"Origin": BASE},
                        follow_redirects=False)
    assert reply.status_code == 303, reply.text
    return client


@pytest.fixture
def cluster() -> Backend:
    return Backend(frozenset({"runs", "workers"}))


def test_the_timeline_shows_each_slot_in_the_tasks_zone_with_its_outcome(
        cluster: Backend) -> None:
    page = _client(cluster, "ql3_viewer").get("/tasks/京东签到/occurrences")
    assert page.status_code == 200
    html = page.text
    assert f"{JD} 的调度记录" in html and "Asia/Shanghai" in html
    # 00:00 UTC is 08:00 in Shanghai; a range shows both ends and the count
    assert "2026-12-01 08:00:00</time> – <time" in html and "2 个时刻" in html
    assert "已错过" in html and "原因：停机期间错过" in html
    assert "已跳过：排队已满（并发策略 allow）" in html
    assert 'href="/runs/run-7"' in html and "运行 #7" in html and "成功" in html
    assert html.index("2026-12-01 08:00:00") < html.index("2026-11-29 08:00:00")  # newest first
    assert 'href="/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/occurrences?before=o2"' in html


def test_the_older_page_follows_the_cursor_and_offers_the_newest_again(
        cluster: Backend) -> None:
    client = _client(cluster, "ql3_operator", "en-US")
    html = client.get("/tasks/京东签到/occurrences", params={"before": "o2"}).text
    assert cluster.asked[-1] == (JD, "o2")
    assert "Occurrences of 京东签到" in html and "Skipped: the queue was full" in html
    newest = '<a href="/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/occurrences">'
    assert newest in html
    assert "?before=" not in html  # no older page after the last


def test_an_unknown_task_is_404_and_task_values_are_escaped(cluster: Backend) -> None:
    client = _client(cluster, "ql3_viewer")
    assert client.get("/tasks/没有/occurrences").status_code == 404
    html = client.get("/tasks/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E/occurrences").text
    assert EVIL not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_tasks_rows_link_their_occurrences_and_warn_of_no_live_worker(
        cluster: Backend) -> None:
    html = _client(cluster, "ql3_viewer").get("/").text
    assert 'href="/tasks/%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0/occurrences"' in html
    assert html.count("⚠ 没有匹配标签的在线节点") == 1  # the one task, not the other
    assert "本页有 1 个任务没有标签匹配的在线节点" in html and 'href="/workers"' in html


def test_the_workers_page_lists_pools_workers_and_unmatched_tasks_read_only(
        cluster: Backend) -> None:
    client = _client(cluster, "ql3_viewer")
    html = client.get("/").text
    assert '<a href="/workers">执行节点</a>' in html
    page = client.get("/workers")
    assert page.status_code == 200
    html = page.text
    assert "默认池" in html and "节点-甲" in html and "zone=a" in html
    assert "1 / 4" in html and "在线" in html and "2 分钟前" in html
    assert 'datetime="2026-12-02T03:04:05.123+00:00">2026-12-02 03:04:05 UTC</time>' in html
    assert "/static/localtime.js" in html
    assert "platform=tb" in html and "另有 2 个未列出" in html
    assert "<form method=\"post\" action=\"/tasks" not in html  # no write control


def test_a_profile_without_workers_hides_the_page_and_answers_501() -> None:
    local = Backend(FEATURES - {"workers"})
    client = _client(local, "ql3_operator")
    assert "/workers" not in client.get("/").text
    assert client.get("/workers").status_code == 501
    assert client.get("/tasks/京东签到/occurrences").status_code == 200  # every profile


def test_ago_counts_seconds_minutes_hours_and_days() -> None:
    words = {"ago.s": "{n}s", "ago.m": "{n}m", "ago.h": "{n}h", "ago.d": "{n}d"}
    assert [ago(v, words) for v in (0, 59.9, 60, 3_599, 3_600, 86_400 * 3, None)] == [
        "0s", "59s", "1m", "59m", "1h", "3d", ""]
