"""Operator views of retention: ``retention status`` and ``retention retry`` (ADR-0379 §4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.retention.claims import queries
from qinglong.shared.ids import validate_uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection

MANUAL_LISTED = 100


def retention_status(conn: Connection) -> dict[str, Any]:
    """Counts and the manual backlog, JSON-ready.

    Shape: ``{"controls": {"pending"|"leased"|"manual": n}, "tombstones": {"deleted"|
    "already_absent": n}, "manual": [{"attempt_id", "artifact_id", "failure_count",
    "last_failure_class", "last_failure_at" (ISO 8601 or None)}]}`` (at most 100 listed).
    Reads in one transaction it opens on ``conn`` (an idle SQLAlchemy Connection).
    """
    q = queries()
    with conn.begin():
        counts = run_named(conn, q["status_counts"]).all()
        manual = run_named(conn, q["status_manual"], {"limit": MANUAL_LISTED}).all()
    out: dict[str, Any] = {
        "controls": {"pending": 0, "leased": 0, "manual": 0},
        "tombstones": {"deleted": 0, "already_absent": 0},
    }
    for kind, name, n in counts:
        out["controls" if kind == "control" else "tombstones"][name] = int(n)
    out["manual"] = [
        {"attempt_id": str(a), "artifact_id": art, "failure_count": n, "last_failure_class": c,
         "last_failure_at": at.isoformat() if at else None}
        for a, art, n, c, at in manual
    ]
    return out


def retention_retry(conn: Connection, attempt_ids: list[str]) -> list[str]:
    """Make the given manual or failed controls due with a reset failure count; returns the
    ids changed.

    Due means now, or at the row's eligibility if that is later. A control under an unexpired
    lease, one that never failed, an unknown or an already retired id is absent from the
    result. One transaction, opened and committed on ``conn`` (an idle SQLAlchemy
    Connection). ValidationError on a malformed id.
    """
    ids = [validate_uuid7(a, "attempt_id") for a in attempt_ids]
    if not ids:
        return []
    with conn.begin():
        rows = run_named(conn, queries()["retry_controls"], {"attempt_ids": ids}).all()
    return sorted(str(r[0]) for r in rows)
