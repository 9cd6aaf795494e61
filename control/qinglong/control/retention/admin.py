"""Operator views of retention: ``retention status`` and ``retention retry`` (ADR-0379 §4)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qinglong.control.retention.claims import queries
from qinglong.shared.ids import validate_uuid7

if TYPE_CHECKING:
    import psycopg

MANUAL_LISTED = 100


def retention_status(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Counts and the manual backlog, JSON-ready.

    Shape: ``{"controls": {"pending"|"leased"|"manual": n}, "tombstones": {"deleted"|
    "already_absent": n}, "manual": [{"attempt_id", "artifact_id", "failure_count",
    "last_failure_class", "last_failure_at" (ISO 8601 or None)}]}`` (at most 100 listed).
    """
    q = queries()
    with conn.transaction():
        counts = conn.execute(q["status_counts"]).fetchall()
        manual = conn.execute(q["status_manual"], {"limit": MANUAL_LISTED}).fetchall()
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


def retention_retry(conn: psycopg.Connection[Any], attempt_ids: list[str]) -> list[str]:
    """Make the given manual or failed controls due with a reset failure count; returns the
    ids changed.

    Due means now, or at the row's eligibility if that is later. A control under an unexpired
    lease, one that never failed, an unknown or an already retired id is absent from the
    result. ValidationError on a malformed id.
    """
    ids = [validate_uuid7(a, "attempt_id") for a in attempt_ids]
    if not ids:
        return []
    with conn.transaction():
        rows = conn.execute(queries()["retry_controls"], {"attempt_ids": ids}).fetchall()
    return sorted(str(r[0]) for r in rows)
