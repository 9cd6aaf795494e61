"""Pinned tasks and saved views on the Tasks page over a fake backend, mounted at ``/ui``
with a token sign-in store (docs/panel.md "Pinned tasks and saved views"): rows and views
escaped, the sort passed on and kept by the pager, the writes' redirects, a viewer's
writes 403 before the backend, and a backend without ``views`` keeping the page as before
(no controls; the routes 501). Real backends: tests/app/test_app_pins_ops.py,
integration/control/test_panel_views_backend.py and the browser tests."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette's TestClient prefers httpx2; httpx is installed
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from starlette.applications import Starlette
from starlette.routing import Mount
from test_app_mounted import TokenStore

from qinglong.panel.app import create_app
from qinglong.panel.backend import VIEWS, BackendRefusedError

BASE = "http://testserver"
EVIL = "<script>alert(1)</script>"


class ViewsBackend:
    profile = "cluster"
    features = frozenset({VIEWS})

    def __init__(self, features: frozenset[str] = frozenset({VIEWS})) -> None:
        self.features = features
        self.calls: list[tuple[Any, ...]] = []

    def task_page(self, offset: int, limit: int, query: str,
                  sort: str = "name") -> dict[str, Any]:
        self.calls.append(("task_page", query, sort))
        task = {"name": f"京东{EVIL}", "labels": ["platform=jd"], "schedule": None,
                "timezone": "UTC", "next_fire": None, "last_run": None, "enabled": True,
                "pinned": True}
        return {"tasks": [task], "total": 120, "offset": offset, "limit": limit}

    def views_list(self) -> list[dict[str, Any]]:
        return [{"name": f"视图{EVIL}", "query": "platform=jd", "sort": "-name"}]

    def task_pin(self, name: str, pinned: bool) -> dict[str, Any]:
        if name == "没有":
            raise BackendRefusedError("not_found", "no live task has this name", usage=True)
        self.calls.append(("task_pin", name, pinned))
        return {"name": name, "pinned": pinned}

    def views_save(self, name: str, query: str, sort: str) -> dict[str, Any]:
        if not name:
            raise BackendRefusedError("validation", "name: 1-100 characters", usage=True)
        self.calls.append(("views_save", name, query, sort))
        return {"name": name, "query": query, "sort": sort}

    def views_remove(self, name: str) -> dict[str, Any]:
        self.calls.append(("views_remove", name))
        return {"name": name, "removed": True}


def _client(backend: ViewsBackend, token: str) -> tuple[TestClient, str]:
    panel = create_app(backend, TokenStore())  # type: ignore[arg-type]
    client = TestClient(Starlette(routes=[Mount("/ui", panel)]), base_url=BASE,
                        headers={"Origin": BASE, "Accept-Language": "zh-CN"})
    assert client.post("/ui/signin", data={"token": token},
                       follow_redirects=False).status_code == 303
    page = client.get("/ui/")
    assert page.status_code == 200
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    return client, csrf


def test_rows_and_views_are_escaped_and_the_sort_is_kept() -> None:
    backend = ViewsBackend()
    client, _csrf = _client(backend, "ql3_operator")
    page = client.get("/ui/?q=platform%3Djd&sort=next_fire").text
    assert EVIL not in page and "&lt;script&gt;" in page
    assert backend.calls[-1] == ("task_page", "platform=jd", "next_fire")
    assert "已置顶" in page and "取消置顶" in page
    assert '<option value="next_fire" selected>' in page
    assert 'name="sort" value="next_fire"' in page  # what "save current" saves
    assert 'href="/ui/?q=platform%3Djd&amp;sort=-name"' in page  # a view's link
    assert "sort=next_fire&amp;offset=50" in page  # the pager keeps the sort
    assert client.get("/ui/?sort=bogus").status_code == 200
    assert backend.calls[-1] == ("task_page", "", "name")


def test_writes_redirect_and_refusals_are_worded() -> None:
    backend = ViewsBackend()
    client, csrf = _client(backend, "ql3_operator")
    pin = client.post("/ui/tasks/%E4%BA%AC%E4%B8%9C/pin?next=/ui/%3Fsort%3D-name",
                      data={"csrf": csrf}, follow_redirects=False)
    assert pin.status_code == 303 and pin.headers["location"] == "/ui/?sort=-name"
    client.post("/ui/tasks/%E4%BA%AC%E4%B8%9C/unpin", data={"csrf": csrf})
    saved = client.post("/ui/views/save", data={"csrf": csrf, "name": "京东", "q": "jd",
                                                "sort": "-name"}, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == "/ui/?q=jd&sort=-name"
    client.post("/ui/views/delete", data={"csrf": csrf, "name": "京东"})
    assert [c for c in backend.calls if c[0] != "task_page"] == [
        ("task_pin", "京东", True), ("task_pin", "京东", False),
        ("views_save", "京东", "jd", "-name"), ("views_remove", "京东")]
    bad = client.post("/ui/views/save", data={"csrf": csrf, "name": "", "sort": "name"})
    assert bad.status_code == 400 and "视图名称须为" in bad.text
    assert client.post("/ui/tasks/%E6%B2%A1%E6%9C%89/pin",
                       data={"csrf": csrf}).status_code == 404


def test_a_viewer_sees_views_without_controls_and_its_writes_are_403() -> None:
    backend = ViewsBackend()
    client, csrf = _client(backend, "ql3_viewer")
    page = client.get("/ui/").text
    assert "视图&lt;script&gt;" in page  # listed, and opened by its link
    assert "/pin" not in page and "/views/save" not in page and "/views/delete" not in page
    for path in ("/ui/tasks/x/pin", "/ui/tasks/x/unpin", "/ui/views/save",
                 "/ui/views/delete"):
        reply = client.post(path, data={"csrf": csrf, "name": "v", "sort": "name"})
        assert reply.status_code == 403, path
    assert [c for c in backend.calls if c[0] != "task_page"] == []


@pytest.mark.parametrize("path", ["/ui/tasks/x/pin", "/ui/views/save"])
def test_a_backend_without_views_has_no_controls_and_the_routes_are_501(path: str) -> None:
    backend = ViewsBackend(frozenset())
    client, csrf = _client(backend, "ql3_operator")
    page = client.get("/ui/?sort=-name").text
    assert 'id="views"' not in page and 'id="sort"' not in page and "/pin" not in page
    assert backend.calls[-1] == ("task_page", "", "name")  # by name: no sort asked
    assert client.post(path, data={"csrf": csrf}).status_code == 501
