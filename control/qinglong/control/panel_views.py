"""Pinned tasks and saved views of the cluster panel's Tasks page (docs/panel.md "Pinned
tasks and saved views"; migration 0017).

A pin is the task row's ``pinned`` flag (everyone's Tasks page shows it first; not part
of the task's definition: no version, no event). A saved view is a row of ``panel_views``
keyed by the signed-in token's name. Listing needs any session; pinning, saving and
deleting need one that may write (operator or admin, as run/enable/disable), refused here
too (``BackendRefusedError`` ``forbidden``) whatever the panel checked first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert

from qinglong.control.db.tables import panel_views, tasks
from qinglong.panel.backend import SORTS, BackendRefusedError

if TYPE_CHECKING:
    from qinglong.control.api.context import ApiContext

MAX_VIEWS = 50  # a user's saved views


def _text(value: str, field: str, low: int, high: int) -> str:
    value = value.strip()
    if not low <= len(value) <= high or any(ord(ch) < 32 for ch in value):
        raise BackendRefusedError("validation", f"{field}: {low}-{high} characters, no "
                                  "control characters", usage=True)
    return value


class ViewsMixin:
    """``task_pin`` and ``views_*`` of ``ControlPanelBackend`` (``self.ctx``, ``_actor``
    and ``_guard`` are the backend's). Every method blocks."""

    ctx: ApiContext

    def _actor(self, write: bool) -> str:
        raise NotImplementedError

    def _guard(self, fn: Any) -> Any:
        raise NotImplementedError

    def task_pin(self, name: str, pinned: bool) -> dict[str, Any]:
        """Pin or unpin the live task ``name`` (found as the API finds it):
        ``{"name", "pinned"}``; ``not_found`` for no live task."""
        from qinglong.control.api.task_store import live_task

        self._actor(write=True)

        def write() -> dict[str, Any]:
            with self.ctx.engine.begin() as conn:
                row = live_task(conn, self.ctx.project_id, name, lock=True)
                conn.execute(update(tasks).where(tasks.c.id == row["id"])
                             .values(pinned=pinned))
            return {"name": row["name"], "pinned": pinned}

        result: dict[str, Any] = self._guard(write)
        return result

    def views_list(self) -> list[dict[str, Any]]:
        """The signed-in token name's views by name: ``[{"name", "query", "sort"}]``."""
        user = self._actor(write=False)

        def read() -> list[dict[str, Any]]:
            with self.ctx.engine.connect() as conn:
                rows = conn.execute(select(panel_views.c.name, panel_views.c.query,
                                           panel_views.c.sort)
                                    .where(panel_views.c.token_name == user)
                                    .order_by(panel_views.c.name)).mappings()
                return [dict(r) for r in rows]

        result: list[dict[str, Any]] = self._guard(read)
        return result

    def views_save(self, name: str, query: str, sort: str) -> dict[str, Any]:
        """Save (or replace) the view ``name``: at most 100 characters of name, 200 of
        query, a sort of ``SORTS``, at most MAX_VIEWS a user; ``validation`` otherwise,
        nothing stored."""
        user = self._actor(write=True)
        view = {"name": _text(name, "name", 1, 100), "query": _text(query, "query", 0, 200),
                "sort": sort}
        if sort not in SORTS:
            raise BackendRefusedError("validation", "sort: unknown", usage=True)

        def write() -> dict[str, Any]:
            with self.ctx.engine.begin() as conn:
                others = conn.execute(select(func.count()).select_from(panel_views).where(
                    panel_views.c.token_name == user,
                    panel_views.c.name != view["name"])).scalar_one()
                if others >= MAX_VIEWS:
                    raise BackendRefusedError("validation", f"at most {MAX_VIEWS} views",
                                              usage=True)
                stmt = insert(panel_views).values(token_name=user, created_at=func.now(),
                                                  **view)
                conn.execute(stmt.on_conflict_do_update(
                    index_elements=[panel_views.c.token_name, panel_views.c.name],
                    set_={"query": stmt.excluded.query, "sort": stmt.excluded.sort}))
            return view

        result: dict[str, Any] = self._guard(write)
        return result

    def views_remove(self, name: str) -> dict[str, Any]:
        """Delete the view ``name`` of the signed-in token's name: ``{"name", "removed"}``."""
        user = self._actor(write=True)

        def write() -> dict[str, Any]:
            with self.ctx.engine.begin() as conn:
                gone = conn.execute(delete(panel_views).where(
                    panel_views.c.token_name == user, panel_views.c.name == name)).rowcount
            return {"name": name, "removed": bool(gone)}

        result: dict[str, Any] = self._guard(write)
        return result
