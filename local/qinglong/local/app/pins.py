"""Pinned tasks and saved views, the socket ops behind the panel's Tasks page (migration
0009; docs/protocols.md §3.8, docs/panel.md "Pinned tasks and saved views"):

``task_pin`` {name, pinned} -> ``{"name", "pinned"}`` (NotFoundError: no live task);
``views_list`` -> ``{"views": [{"name", "query", "sort"}]}`` by name; ``views_save``
{name, query, sort} -> the view (one of the same name is replaced); ``views_rm`` {name} ->
``{"name", "removed": bool}``. ``sort`` is one of :data:`SORTS`. The data directory is
one user's, so views carry no user. Bad input is a ValidationError, nothing written.
"""

from __future__ import annotations

from typing import Any

from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import NotFoundError, ValidationError

#: sort -> the ORDER BY of the live tasks (pinned first in every one)
SORTS = {"name": "pinned DESC, name", "-name": "pinned DESC, name DESC",
         "next_fire": "pinned DESC, next_fire_at_ms IS NULL, next_fire_at_ms, name"}
OPS = ("task_pin", "views_list", "views_save", "views_rm")
MAX_VIEWS = 50


def order_by(sort: str) -> str:
    """The ORDER BY text of ``sort``; ValidationError for another."""
    if sort not in SORTS:
        raise ValidationError("sort", f"one of {', '.join(SORTS)}")
    return SORTS[sort]


def pinned_names(repo: LocalRunRepository) -> set[str]:
    """The names of the live pinned tasks."""
    return {r[0] for r in repo.db.read(lambda c: c.execute(
        "SELECT name FROM tasks WHERE pinned = 1 AND deleted_at_ms IS NULL").fetchall())}


def _text(args: dict[str, Any], key: str, low: int, high: int) -> str:
    value = args[key]
    if not isinstance(value, str) or not low <= len(value.strip()) <= high or any(
            ord(ch) < 32 for ch in value):
        raise ValidationError(key, f"{low}-{high} characters, no control characters")
    return value.strip()


def call(repo: LocalRunRepository, op: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one of :data:`OPS` with ``args`` (shapes in the module's docstring)."""
    if op == "task_pin":
        task = repo.get_task(str(args["name"]))
        pinned = bool(args["pinned"])
        if not repo.db.write(lambda c: c.execute(
                "UPDATE tasks SET pinned = ? WHERE id = ? AND deleted_at_ms IS NULL",
                (int(pinned), task.id)).rowcount):
            raise NotFoundError("no live task has this name")
        return {"name": task.name, "pinned": pinned}
    if op == "views_list":
        return {"views": [{"name": n, "query": q, "sort": s} for n, q, s in repo.db.read(
            lambda c: c.execute("SELECT name, query, sort FROM saved_views ORDER BY name")
            .fetchall())]}
    name = _text(args, "name", 1, 100)
    if op == "views_rm":
        gone = repo.db.write(lambda c: c.execute(
            "DELETE FROM saved_views WHERE name = ?", (name,)).rowcount)
        return {"name": name, "removed": bool(gone)}
    view = {"name": name, "query": _text(args, "query", 0, 200), "sort": str(args["sort"])}
    order_by(view["sort"])

    def save(c: Any) -> None:
        if c.execute("SELECT count(*) FROM saved_views WHERE name <> ?",
                     (name,)).fetchone()[0] >= MAX_VIEWS:
            raise ValidationError("name", f"at most {MAX_VIEWS} views")
        c.execute("INSERT INTO saved_views VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE"
                  " SET query = excluded.query, sort = excluded.sort",
                  (name, view["query"], view["sort"], repo.clock()))

    repo.db.write(save)
    return view
