"""Cluster history pruning: one bounded batch at a time (docs/operations.md "History pruning").

Runs, attempts, events and occurrences older than the history retention (the job row's
``retention_s``, default 90 days; a task's ``history_retention_s`` overrides it) are deleted by
``prune_batch``, which whichever replica holds the job row runs (``FOR UPDATE SKIP LOCKED``:
a second replica's batch does nothing and returns None). Each task's newest ``keep_runs``
(default 20) runs stay, as the local profile keeps them; so does every run with an attempt under
a live lease or with a log artifact that has no tombstone yet (ADR-0379 runs first). A run with a
tombstone keeps its run, attempt and artifact rows (the tombstones' foreign keys, migration
0002; the runtime role never deletes a tombstone): only its events and occurrences go. Token
rows are never touched. A batch walks at most ``limit`` runs from a cursor, so its work does not
grow with the table, with or without planner statistics
(``integration/control/test_control_claim_work.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.db.queries import load_queries
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

BATCH_DEFAULT = 500
BATCH_MAX = 5_000
_QUERIES_DIR = str(Path(__file__).parent)


def queries() -> dict[str, Any]:
    """The named statements of ``history/queries.sql`` (read once per process)."""
    return load_queries(_QUERIES_DIR, "queries.sql")


@dataclass(frozen=True, slots=True)
class Batch:
    """What one batch did: ``limit`` asked, runs ``scanned`` from the cursor (fewer than
    ``limit``: the walk reached the horizon and starts again from the oldest run next time);
    rows deleted per table; ``kept``: due runs with a tombstone whose run, attempt and
    artifact rows stay."""

    limit: int
    scanned: int
    runs: int
    attempts: int
    events: int
    occurrences: int
    kept: int

    @property
    def full(self) -> bool:
        """True when more may be due right away (the batch walked a whole page)."""
        return self.scanned >= self.limit


def prune_batch(engine: Engine, owner: str, *, limit: int = BATCH_DEFAULT) -> Batch | None:
    """Run one batch of at most ``limit`` (1..5,000) runs in its own short transaction.

    Returns the Batch, or None when another replica holds the job row. ``owner`` (a replica
    id, recorded as the last batch's owner). Raises ValidationError for a limit out of range;
    database errors (``sqlalchemy.exc.DBAPIError``) pass through with nothing deleted.
    """
    if not 1 <= limit <= BATCH_MAX:
        raise ValidationError("limit", f"{limit} outside 1..{BATCH_MAX}")
    q = queries()
    with engine.begin() as conn:
        run_named(conn, q["prune_batch_plan"])
        row = run_named(conn, q["prune_batch"], {"limit": limit, "owner": owner}).first()
    return None if row is None else Batch(limit, *(int(v) for v in row))


def history_status(conn: Connection) -> dict[str, Any]:
    """The job as ``ql3 control history status`` shows it, JSON-ready.

    Shape: ``{"retention_s", "keep_runs", "horizon" (ISO 8601), "past_horizon" (terminal runs
    finished before the horizon: due unless kept), "passes", "total_runs", "last_batch": None |
    {"at", "owner", "scanned", "runs", "attempts", "events", "occurrences", "kept"}}``.
    Reads in one transaction it opens on ``conn`` (an idle SQLAlchemy Connection).
    """
    with conn.begin():
        row = run_named(conn, queries()["status"]).one()
    (retention_s, keep_runs, horizon, passes, at, owner, scanned, runs, attempts, events,
     occurrences, kept, total, past) = row
    last = None if at is None else {
        "at": _iso(at), "owner": owner, "scanned": scanned, "runs": runs,
        "attempts": attempts, "events": events, "occurrences": occurrences, "kept": kept}
    return {"retention_s": int(retention_s), "keep_runs": int(keep_runs),
            "horizon": _iso(horizon), "past_horizon": int(past), "passes": int(passes),
            "total_runs": int(total), "last_batch": last}


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()
