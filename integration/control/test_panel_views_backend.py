"""Pinned tasks and saved views over ``ControlPanelBackend`` and real PostgreSQL as the
runtime role (docs/panel.md "Pinned tasks and saved views"; migration 0017): the pin is the
task row's and sorts it first in every sort and search, views are each token name's own,
bad input and a viewer's writes are refused by the backend itself, nothing stored."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from api_world import ApiWorld

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@contextmanager
def _as(scope: str, actor: str) -> Iterator[Any]:
    from qinglong.control.panel_backend import ControlPanelBackend  # noqa: F401
    from qinglong.panel.security import Session, current_session

    mark = current_session.set(Session("s", "c", can_write=scope != "viewer", actor=actor,
                                       scope=scope))
    try:
        yield
    finally:
        current_session.reset(mark)


def _names(backend: Any, query: str = "", sort: str = "name") -> list[str]:
    return [t["name"] for t in backend.task_page(0, 50, query, sort)["tasks"]]


def test_pins_views_and_refusals_as_the_runtime_role(api: ApiWorld) -> None:
    from qinglong.control.panel_backend import ControlPanelBackend
    from qinglong.panel.backend import BackendRefusedError

    for name, labels, schedule in (("aa", {"platform": "jd"}, "0 8 * * *"),
                                   ("京东签到", {"platform": "jd"}, None),
                                   ("zz", {"kind": "ops"}, "0 8 * * *")):
        answer = api.client.post("/v1/tasks", json={"name": name, "shell": "true",
                                                    "labels": labels, "schedule": schedule},
                                 headers=api.as_("admin"))
        assert answer.status_code == 201, answer.text
    api.sql("UPDATE tasks SET next_fire_at = now() + interval '1 hour' WHERE name = 'zz'")
    api.sql("UPDATE tasks SET next_fire_at = now() + interval '2 hours' WHERE name = 'aa'")
    backend = ControlPanelBackend(api.ctx)
    with _as("operator", "运维-张三"):
        assert _names(backend) == ["aa", "zz", "京东签到"]
        assert backend.task_pin("京东签到", True) == {"name": "京东签到", "pinned": True}
        assert [(t["name"], t["pinned"]) for t in backend.task_page(0, 50, "", "name")[
            "tasks"]] == [("京东签到", True), ("aa", False), ("zz", False)]
        assert _names(backend, sort="-name") == ["京东签到", "zz", "aa"]
        assert _names(backend, sort="next_fire") == ["京东签到", "zz", "aa"]
        assert _names(backend, "platform=jd", "-name") == ["京东签到", "aa"]
        assert _names(backend, "jd", "-name") == ["京东签到", "aa"]  # a word search
        backend.views_save("京东任务", "platform=jd", "next_fire")
        backend.views_save("京东任务", "platform=jd", "-name")  # replaced
        assert backend.views_list() == [{"name": "京东任务", "query": "platform=jd",
                                         "sort": "-name"}]
        for bad in (("", "", "name"), ("x" * 101, "", "name"), ("v", "q" * 201, "name"),
                    ("v", "", "random"), ("a\tb", "", "name")):
            with pytest.raises(BackendRefusedError) as refused:
                backend.views_save(*bad)
            assert refused.value.usage
        with pytest.raises(BackendRefusedError) as refused:
            backend.task_pin("没有", True)
        assert refused.value.code == "not_found"
    with _as("operator", "运维-李四"):
        assert backend.views_list() == []  # another token name's views are not listed
        assert backend.views_remove("京东任务") == {"name": "京东任务", "removed": False}
    with _as("viewer", "运维-张三"):
        assert len(backend.views_list()) == 1  # a viewer lists its views
        for write in (lambda: backend.task_pin("aa", True),
                      lambda: backend.views_save("v", "", "name"),
                      lambda: backend.views_remove("京东任务")):
            with pytest.raises(BackendRefusedError) as refused:
                write()
            assert refused.value.code == "forbidden"
    assert api.sql("SELECT name FROM tasks WHERE pinned") == [("京东签到",)]
    assert api.sql("SELECT token_name, name FROM panel_views") == [("运维-张三", "京东任务")]
    with _as("operator", "运维-张三"):
        assert backend.views_remove("京东任务")["removed"] is True
    assert api.sql("SELECT count(*) FROM panel_views") == [(0,)]
