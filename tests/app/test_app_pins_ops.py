"""The socket ops of pinned tasks and saved views (docs/protocols.md §3.8, docs/panel.md
"Pinned tasks and saved views") over a real migrated SQLite database: ``task_pin`` puts a
task first in ``task_page`` whatever the sort, ``views_save``/``views_list``/``views_rm``
keep a named search and sort; bad input is refused with nothing written."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from qinglong.local.app import ops
from qinglong.local.app.service import LocalService
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import NotFoundError, ValidationError


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LocalService]:
    db = open_database(str(tmp_path / "s.db"))
    svc = LocalService(LocalRunRepository(db), supervised=False)
    for name, labels in (("aa", ["platform=jd"]), ("京东签到", ["platform=jd"]),
                         ("zz", ["platform=tb"])):
        svc.task_add({"name": name, "schedule": "0 8 * * *", "argv": ["true"],
                      "labels": labels})
    # as serve's scheduler stores them: zz fires first, aa later, 京东签到 not computed yet
    db.write(lambda c: c.executemany(
        "UPDATE tasks SET next_fire_at_ms = ?, next_fire_pending = NULL WHERE name = ?",
        [(2_000_000, "zz"), (3_000_000, "aa")]))
    yield svc
    db.close()


def _names(service: LocalService, **args: Any) -> list[str]:
    return [t["name"] for t in ops.call(service, "task_page", args)["tasks"]]


def test_a_pinned_task_sorts_first_in_every_sort_and_search(service: LocalService) -> None:
    assert _names(service) == ["aa", "zz", "京东签到"]
    assert ops.call(service, "task_pin", {"name": "京东签到", "pinned": True}) == {
        "name": "京东签到", "pinned": True}
    page = ops.call(service, "task_page", {})
    assert [(t["name"], t["pinned"]) for t in page["tasks"]] == [
        ("京东签到", True), ("aa", False), ("zz", False)]
    assert _names(service, sort="-name") == ["京东签到", "zz", "aa"]
    assert _names(service, sort="next_fire") == ["京东签到", "zz", "aa"]
    assert _names(service, query="platform=jd", sort="-name") == ["京东签到", "aa"]
    assert _names(service, offset=1, limit=1) == ["aa"]  # paged after the pins
    ops.call(service, "task_pin", {"name": "京东签到", "pinned": False})
    assert _names(service) == ["aa", "zz", "京东签到"]
    assert _names(service, sort="next_fire") == ["zz", "aa", "京东签到"]  # none last


def test_pin_refuses_an_unknown_task_and_task_page_a_bad_sort(service: LocalService) -> None:
    with pytest.raises(NotFoundError):
        ops.call(service, "task_pin", {"name": "nope", "pinned": True})
    with pytest.raises(ValidationError):
        ops.call(service, "task_page", {"sort": "name; DROP TABLE tasks"})
    with pytest.raises(ValidationError):
        ops.call(service, "task_pin", {"name": "aa"})  # no flag: bad arguments


def test_views_save_list_replace_and_remove(service: LocalService) -> None:
    assert ops.call(service, "views_list", {}) == {"views": []}
    saved = ops.call(service, "views_save", {"name": "京东任务", "query": "platform=jd",
                                             "sort": "-name"})
    assert saved == {"name": "京东任务", "query": "platform=jd", "sort": "-name"}
    ops.call(service, "views_save", {"name": "all", "query": "", "sort": "name"})
    ops.call(service, "views_save", {"name": "京东任务", "query": "platform=jd",
                                     "sort": "next_fire"})  # same name: replaced
    assert ops.call(service, "views_list", {})["views"] == [
        {"name": "all", "query": "", "sort": "name"},
        {"name": "京东任务", "query": "platform=jd", "sort": "next_fire"}]
    assert ops.call(service, "views_rm", {"name": "京东任务"}) == {"name": "京东任务",
                                                                "removed": True}
    assert ops.call(service, "views_rm", {"name": "京东任务"})["removed"] is False
    assert [v["name"] for v in ops.call(service, "views_list", {})["views"]] == ["all"]


@pytest.mark.parametrize("args", [
    {"name": "", "query": "", "sort": "name"},
    {"name": "x" * 101, "query": "", "sort": "name"},
    {"name": "a\nb", "query": "", "sort": "name"},
    {"name": "v", "query": "q" * 201, "sort": "name"},
    {"name": "v", "query": "", "sort": "random"},
    {"name": "v", "query": 3, "sort": "name"},
])
def test_a_bad_view_is_refused_and_nothing_is_stored(service: LocalService,
                                                     args: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ops.call(service, "views_save", args)
    assert ops.call(service, "views_list", {}) == {"views": []}


def test_at_most_fifty_views(service: LocalService) -> None:
    for n in range(50):
        ops.call(service, "views_save", {"name": f"v{n}", "query": "", "sort": "name"})
    with pytest.raises(ValidationError):
        ops.call(service, "views_save", {"name": "one more", "query": "", "sort": "name"})
    ops.call(service, "views_save", {"name": "v0", "query": "x", "sort": "name"})  # replace
    assert len(ops.call(service, "views_list", {})["views"]) == 50
