"""The partial-log sweep (docs/protocols.md §4.9 "Partial logs"): database only.

An ended attempt without a verified artifact (``lost``, ``not_started``, a log that could not
be stored) keeps its chunk rows as its partial log. Once the task's log retention
(``tasks.log_retention_s``) has passed since the attempt ended, one sweep deletes them and
sets ``attempts.log_rows_retired_at`` (the marker: a read answers 410 ``log_retired``). These
logs are never S3 objects and never enter ADR-0379's tables. At most ``limit`` attempts per
sweep, locked with SKIP LOCKED, so replicas sweeping at once share the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.livelog.statements import sql

if TYPE_CHECKING:
    from sqlalchemy import Engine

PARTIAL_SWEEP_PERIOD_S = 60.0


def sweep_partial_logs(engine: Engine, *, limit: int = 100) -> int:
    """Retire at most ``limit`` expired partial logs in one transaction; how many."""
    with engine.begin() as conn:
        ids = [r[0] for r in run_named(conn, sql("expired_partial_logs"),
                                       {"limit": limit}).all()]
        for attempt_id in ids:
            run_named(conn, sql("retire_partial_log"), {"attempt_id": attempt_id})
    return len(ids)
