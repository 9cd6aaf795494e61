"""The named statements of ``dispatch/queries.sql`` (read once per process) and the tiny
helpers every dispatch step shares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, LiteralString

from qinglong.control.db.engine import run_named
from qinglong.control.db.queries import load_queries
from qinglong.shared.ids import uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection

_DIR = str(Path(__file__).resolve().parent)
LIVE_ATTEMPT = ("claimed", "starting", "running")


def sql(name: str) -> LiteralString:
    """The statement named ``name`` in ``dispatch/queries.sql``; KeyError when unknown."""
    return load_queries(_DIR, "queries.sql")[name]


def insert_event(conn: Connection, *, run_id: str, attempt_id: str | None, kind: str,
                 from_status: str | None, to_status: str,
                 detail: dict[str, Any] | None = None) -> None:
    """One ``events`` row (a UUIDv7 id, database time) in the caller's transaction."""
    run_named(conn, sql("insert_event"), {
        "id": uuid7(), "run_id": run_id, "attempt_id": attempt_id, "kind": kind,
        "from_status": from_status, "to_status": to_status,
        "detail": json.dumps(detail) if detail is not None else None})
