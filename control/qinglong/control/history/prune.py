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
spaces full batches by a duty cycle so claims keep the CPU and disk they need, and its
``run_pass`` prunes until nothing more is due, with no cap on the batches of a pass: the
duty cycle alone bounds pruning's share of the host (bench/README.md, ``history.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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
# under 1 % of the wall time in batches: a claim's p99 is set by the 99 % of claims that meet
# no batch (bench/README.md ``history.py``); 100-run batches of 20-100 ms still prune
# 18,000-90,000 runs an hour, and the rest's cap keeps ~6,000 an hour on any host
DUTY_DEFAULT = 0.005
# long enough that a slow batch (a loaded host) still keeps to the duty: 0.3 s at 0.005
PAUSE_MAX_S = 60.0
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


@dataclass(frozen=True, slots=True)
class Pass:
    """What one ``PacedPruner.run_pass`` did: ``batches`` run (each its own transaction),
    runs and events deleted over them, seconds spent in batches (``busy_s``) and resting
    (``rested_s``), and whether nothing more was due at its end (``caught_up``: a batch walked
    less than a full page) rather than it stopping (``request_stop``) or finding the job held
    by another replica (``held``)."""

    batches: int
    runs: int
    events: int
    busy_s: float
    rested_s: float
    caught_up: bool
    held: bool


def duty_pause_s(batch_s: float, duty: float, *, cap_s: float = PAUSE_MAX_S) -> float:
    """Seconds to rest after a batch that took ``batch_s`` seconds so batches fill at most
    ``duty`` (0 < duty <= 1) of the wall time: ``batch_s * (1 - duty) / duty``, at most
    ``cap_s``. A slow batch (a busy host) earns a longer rest. Raises ValidationError for a
    duty out of range."""
    if not 0 < duty <= 1:
        raise ValidationError("duty", f"{duty} outside (0, 1]")
    return min(cap_s, max(0.0, batch_s) * (1 - duty) / duty)


class PacedPruner:
    """``prune_batch`` with a duty cycle (docs/operations.md "History pruning"): after a full
    batch (more is due at once) ``tick`` rests ``duty_pause_s`` of the batch's own duration
    before returning, so back-to-back batches keep to ``duty`` of the wall time, and
    ``run_pass`` repeats ticks until nothing more is due. ``request_stop()`` ends a rest at
    once. ``limit`` as ``prune_batch``; ``duty`` in (0, 1] (1: no rest). ``batch``, ``clock``
    (seconds) and ``rest`` (waits its argument in seconds, returns True when stopped) are
    ``prune_batch``, ``time.monotonic`` and the stop event's wait unless a unit test passes
    fakes. Raises ValidationError for a limit or duty out of range."""

    def __init__(self, engine: Engine, owner: str, *, limit: int = BATCH_DEFAULT,
                 duty: float = DUTY_DEFAULT,
                 batch: Callable[[Engine, str, int], Batch | None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 rest: Callable[[float], bool] | None = None) -> None:
        if not 1 <= limit <= BATCH_MAX:
            raise ValidationError("limit", f"{limit} outside 1..{BATCH_MAX}")
        duty_pause_s(0.0, duty)  # validates duty
        self._engine, self._owner, self._limit, self._duty = engine, owner, limit, duty
        self._stop = threading.Event()
        self._batch = batch or (lambda e, o, n: prune_batch(e, o, limit=n))
        self._clock = clock
        self._rest = rest or self._stop.wait
        self.rested_s = 0.0  # total rest so far (seconds), for benches and status
        self.busy_s = 0.0  # total time in batches so far (seconds)

    def tick(self) -> Batch | None:
        """One batch, then its rest when it was full; returns the batch (None: another
        replica holds the job). Database errors pass through, with no rest."""
        t0 = self._clock()
        batch = self._batch(self._engine, self._owner, self._limit)
        took = self._clock() - t0
        self.busy_s += max(0.0, took)
        if batch is not None and batch.full:
            pause = duty_pause_s(took, self._duty)
            self.rested_s += pause
            self._rest(pause)
        return batch

    def run_pass(self) -> Pass:
        """Ticks until a batch walks less than a full page (nothing more is due now), another
        replica holds the job, or ``request_stop``; no cap on the number of batches, so a
        backlog of any size clears in one pass at ``duty`` of the wall time (the serve's
        ``history_prune`` service calls this once a period). Database errors pass through
        (the service retries with backoff; every finished batch stays committed)."""
        batches = runs = events = 0
        busy0, rested0 = self.busy_s, self.rested_s
        caught_up = held = False
        while not self._stop.is_set():
            batch = self.tick()
            if batch is None:
                held = True
                break
            batches, runs, events = batches + 1, runs + batch.runs, events + batch.events
            if not batch.full:
                caught_up = True
                break
        return Pass(batches, runs, events, self.busy_s - busy0, self.rested_s - rested0,
                    caught_up, held)

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
