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
(``integration/control/test_control_claim_work.py``). A due run another session holds locked
is skipped (``FOR UPDATE SKIP LOCKED``) and judged again on the next pass. ``PacedPruner``
spaces full batches by a duty cycle so claims keep the CPU and disk they need
(bench/README.md, ``history.py``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.db.queries import load_queries
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

BATCH_DEFAULT = 100
BATCH_MAX = 5_000
DUTY_DEFAULT = 0.25
PAUSE_MAX_S = 5.0
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


def duty_pause_s(batch_s: float, duty: float, *, cap_s: float = PAUSE_MAX_S) -> float:
    """Seconds to rest after a batch that took ``batch_s`` seconds so batches fill at most
    ``duty`` (0 < duty <= 1) of the wall time: ``batch_s * (1 - duty) / duty``, at most
    ``cap_s``. A slow batch (a busy host) earns a longer rest. Raises ValidationError for a
    duty out of range."""
    if not 0 < duty <= 1:
        raise ValidationError("duty", f"{duty} outside (0, 1]")
    return min(cap_s, max(0.0, batch_s) * (1 - duty) / duty)


class PacedPruner:
    """``prune_batch`` as a periodic tick with a duty cycle (docs/operations.md "History
    pruning"): after a full batch (more is due at once) ``tick`` rests ``duty_pause_s`` of the
    batch's own duration before returning, so back-to-back batches keep to ``duty`` of the
    wall time. ``request_stop()`` ends a rest at once. ``limit`` as ``prune_batch``; ``duty`` in
    (0, 1] (1: no rest). Raises ValidationError for either out of range."""

    def __init__(self, engine: Engine, owner: str, *, limit: int = BATCH_DEFAULT,
                 duty: float = DUTY_DEFAULT) -> None:
        if not 1 <= limit <= BATCH_MAX:
            raise ValidationError("limit", f"{limit} outside 1..{BATCH_MAX}")
        duty_pause_s(0.0, duty)  # validates duty
        self._engine, self._owner, self._limit, self._duty = engine, owner, limit, duty
        self._stop = threading.Event()
        self.rested_s = 0.0  # total rest so far (seconds), for benches and status

    def tick(self) -> Batch | None:
        """One batch, then its rest when it was full; returns the batch (None: another
        replica holds the job). Database errors pass through, with no rest."""
        t0 = time.monotonic()
        batch = prune_batch(self._engine, self._owner, limit=self._limit)
        if batch is not None and batch.full:
            pause = duty_pause_s(time.monotonic() - t0, self._duty)
            self.rested_s += pause
            self._stop.wait(pause)
        return batch

    def request_stop(self) -> None:
        """End the current rest and skip later ones (the replica's stop, before it joins the
        periodic services)."""
        self._stop.set()

    def stop(self) -> bool:
        """As ``request_stop``; True (nothing to join)."""
        self._stop.set()
        return True


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
