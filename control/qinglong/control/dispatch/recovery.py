"""Lease recovery sweep (docs/protocols.md §4.2, recovery; issue 11 item 5; case C12).

River's rescuer shape: ``RecoveryConfig`` (validated in the constructor) and ``run_once`` (one
bounded batch); the replica runs it as its ``lease_recovery`` lifecycle, a ``PeriodicService``
(``serve/lifecycle.py``) that owns the thread, the backoff and the stop.

One batch reads at most ``batch`` attempts whose lease expired by the database clock
(``attempts_lease_expiry_idx``); each is recovered in its own short transaction:

1. ``lose_attempt``: compare-and-set on the lease version, a live status and
   ``lease_expires_at <= now()`` — a heartbeat or completion that got there first wins and the
   row is skipped. Reason ``not_started`` when the worker never reported the process started
   (safe to retry), else ``lost`` (issue 11 item 5).
2. The run goes back to ``queued`` with capped jittered backoff by database time when the
   task allows more attempts, no cancel was requested and the task was not removed (read
   fresh under the run's lock, ``run_fate``), else it ends ``lost``; events.

Nothing is keyed by a worker's name: a restarted worker is a new incarnation and inherits
nothing; recovery never needs the old incarnation's row.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.dispatch.statements import insert_event, sql
from qinglong.shared.backoff import retry_delay_s
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import RowMapping

BATCH_DEFAULT = 100
INTERVAL_S_DEFAULT = 1.0


@dataclass(frozen=True)
class RecoveryConfig:
    """``batch``: attempts recovered per ``run_once`` (1–1000). ``interval_s``: pause between
    batches of the replica's ``lease_recovery`` lifecycle (0.01–3600 s; a full batch runs
    the next one at once). ValidationError otherwise."""

    batch: int = BATCH_DEFAULT
    interval_s: float = INTERVAL_S_DEFAULT

    def __post_init__(self) -> None:
        if not 1 <= self.batch <= 1000:
            raise ValidationError("batch", "must be 1–1000")
        if not 0.01 <= self.interval_s <= 3600:
            raise ValidationError("interval_s", "must be 0.01–3600 seconds")


@dataclass(frozen=True)
class RecoveryResult:
    """One batch: ``lost`` attempts moved to lost, of which ``requeued`` runs went back to
    queued and ``runs_lost`` ended lost; ``skipped`` lost their compare-and-set (renewed or
    completed meanwhile); ``full`` when the batch was full (more may be waiting).
    ``reasons``: the ``lost`` attempts by the reason recorded on them — ``not_started``
    (the worker never reported the process started) or ``lost`` — only reasons that
    occurred, summing to ``lost``."""

    lost: int = 0
    requeued: int = 0
    runs_lost: int = 0
    skipped: int = 0
    full: bool = False
    reasons: Mapping[str, int] = field(default_factory=dict)


def _reason(row: RowMapping) -> str:
    """``lost`` once the worker reported the process started, else ``not_started``."""
    return "lost" if row["started"] else "not_started"


class LeaseRecovery:
    """The dispatch-recovery lifecycle of one control replica; any number of replicas may run
    it at once (every step is a compare-and-set). docs/protocols.md §4.2."""

    def __init__(self, engine: Engine, config: RecoveryConfig | None = None, *,
                 rng: random.Random | None = None) -> None:
        self._engine = engine
        self.config = config or RecoveryConfig()
        self._rng = rng

    def run_once(self) -> RecoveryResult:
        """Recover at most ``config.batch`` expired leases; raises the driver's errors (the
        loop survives them; a test sees them)."""
        with self._engine.begin() as conn:
            expired = run_named(conn, sql("expired_leases"),
                                {"limit": self.config.batch}).mappings().all()
        lost = requeued = runs_lost = skipped = 0
        reasons: Counter[str] = Counter()
        for row in expired:
            outcome = self._recover(row)
            if outcome is None:
                skipped += 1
                continue
            lost += 1
            reasons[_reason(row)] += 1
            requeued += outcome == "queued"
            runs_lost += outcome == "lost"
        return RecoveryResult(lost, requeued, runs_lost, skipped,
                              full=len(expired) >= self.config.batch, reasons=dict(reasons))

    def _recover(self, row: RowMapping) -> str | None:
        reason = _reason(row)
        number = int(row["number"])
        delay_s = retry_delay_s(number, base_s=row["retry_backoff_ms"] / 1000.0,
                                cap_s=row["retry_backoff_cap_ms"] / 1000.0, rng=self._rng)
        with self._engine.begin() as conn:
            done = run_named(conn, sql("lose_attempt"), {
                "attempt_id": row["attempt_id"], "lease_version": row["lease_version"],
                "reason": reason}).first()
            if done is None:
                return None  # renewed, completed or recovered by another replica first
            fate = run_named(conn, sql("run_fate"), {"run_id": row["run_id"]}).mappings().one()
            retry = (not fate["cancel"] and not fate["task_deleted"]
                     and number < int(row["max_attempts"]))
            insert_event(conn, run_id=row["run_id"], attempt_id=row["attempt_id"],
                         kind="attempt_lost", from_status=row["status"], to_status="lost",
                         detail={"reason": reason})
            if retry:
                moved = run_named(conn, sql("requeue_run"),
                                  {"run_id": row["run_id"], "delay_s": delay_s}).mappings().first()
            else:
                moved = run_named(conn, sql("finish_run"), {
                    "run_id": row["run_id"], "status": "lost", "exit_code": None,
                }).mappings().first()
            if moved is None:
                return "attempt_only"  # the run had already left dispatching/running
            insert_event(conn, run_id=row["run_id"], attempt_id=row["attempt_id"],
                         kind="run_requeued" if retry else "run_lost",
                         from_status=moved["from_status"], to_status=moved["to_status"],
                         detail={"reason": reason})
            # requeued, or ended (which may free a replace successor): wake waiting claims
            run_named(conn, sql("notify_claimable"))
            return str(moved["to_status"])
