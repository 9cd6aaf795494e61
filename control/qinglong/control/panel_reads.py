"""The cluster panel's Occurrences and Workers reads (docs/panel.md "Pages"), over the same
services as the API: a task's occurrence ledger as ``GET /v1/tasks/{name}/occurrences``
reads it (``scheduling/ledger.py``, docs/protocols.md §4.2), and the worker listing of
``GET /v1/workers`` (``api/worker_listing.py``). Answers have the panel port's shapes
(``qinglong.panel.backend.PanelBackend.occurrences_page`` / ``workers_page``). Each function
takes an open connection and raises BackendRefusedError for bad input; the caller maps
database errors (``ControlPanelBackend._guard``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from uuid import UUID

from sqlalchemy import select

from qinglong.control.api import worker_listing as listing
from qinglong.control.api.task_store import live_task
from qinglong.control.db.tables import occurrences, runs
from qinglong.panel.backend import BackendRefusedError

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from qinglong.control.api.context import ApiContext

MAX_PAGE = 200
UNMATCHED_SHOWN = 100


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def _cursor(before: str | None, what: str) -> str | None:
    if before is None:
        return None
    try:
        return str(UUID(before))
    except ValueError:
        raise BackendRefusedError("bad_request", f"not {what} cursor", usage=True) from None


def _limit(limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise BackendRefusedError("bad_request", f"limit must be 1-{MAX_PAGE}", usage=True)


def labels_text(labels: Any) -> list[str]:
    """A JSONB label object as sorted ``key=value`` words (the Tasks page's form)."""
    return [f"{k}={v}" for k, v in sorted(dict(labels or {}).items())]


def occurrences_page(conn: Connection, ctx: ApiContext, task: str, before: str | None,
                     limit: int) -> dict[str, Any]:
    """The live task ``task``'s ledger rows newest first by id (keyset ``before``), each
    with the run it names (number and status). ApiError 404 for no such live task (the
    backend's guard makes it ``not_found``); BackendRefusedError for a bad cursor/limit."""
    _limit(limit)
    cursor = _cursor(before, "an occurrence")
    row = live_task(conn, ctx.project_id, task)
    o = occurrences
    query = (select(o, runs.c.number.label("run_number"), runs.c.status.label("run_status"))
             .outerjoin(runs, runs.c.id == o.c.run_id)
             .where(o.c.task_id == row["id"]))
    if cursor is not None:
        query = query.where(o.c.id < cursor)
    found = list(conn.execute(query.order_by(o.c.id.desc()).limit(limit + 1)).mappings())
    page = found[:limit]
    items = [{"id": str(r["id"]), "outcome": r["outcome"], "reason": None,
              "first_slot": _iso(r["first_slot"]), "last_slot": _iso(r["last_slot"]),
              "slot_count": int(r["slot_count"]), "at_least": False,
              "run": None if r["run_id"] is None else {
                  "id": str(r["run_id"]), "number": r["run_number"],
                  "status": r["run_status"]},
              "recorded_at": _iso(r["recorded_at"])} for r in page]
    return {"task": {"name": row["name"], "schedule": row["schedule"],
                     "timezone": row["timezone"], "enabled": bool(row["enabled"])},
            "items": items, "next": items[-1]["id"] if len(found) > limit else None}


def workers_page(conn: Connection, ctx: ApiContext, before: str | None,
                 limit: int) -> dict[str, Any]:
    """Pools, the incarnations not stopped newest first (keyset ``before``), how many are
    live, and the live tasks no live worker may run (the first 100 by name, and the
    count)."""
    _limit(limit)
    cursor = _cursor(before, "a worker")
    lease_s = listing.lease_s_of(ctx)
    rows = listing.incarnations(conn, lease_s=lease_s, states=("live", "silent"),
                                cursor=cursor, limit=limit + 1)
    page = rows[:limit]
    held = listing.attempts_held(conn, [r["id"] for r in page])
    pools = listing.pools(conn, lease_s=lease_s)
    unmatched, total = listing.unmatched_tasks(conn, ctx.project_id, lease_s=lease_s,
                                               limit=UNMATCHED_SHOWN)
    return {
        "pools": [{"name": p["name"], "labels": labels_text(p["labels"]),
                   "live": int(p["live"])} for p in pools],
        "workers": [{"id": str(r["id"]), "name": r["name"], "pool": r["pool"],
                     "labels": labels_text(r["labels"]), "concurrency": r["concurrency"],
                     "state": r["state"], "started_at": _iso(r["started_at"]),
                     "last_seen_at": _iso(r["last_seen_at"]),
                     "seen_s": max(0.0, float(r["seen_s"])),
                     "attempts_held": held.get(str(r["id"]), 0)} for r in page],
        "next": str(page[-1]["id"]) if len(rows) > limit else None,
        "live": sum(int(p["live"]) for p in pools),
        "unmatched": [{"name": u["name"], "labels": labels_text(u["labels"])}
                      for u in unmatched],
        "unmatched_total": total,
    }
