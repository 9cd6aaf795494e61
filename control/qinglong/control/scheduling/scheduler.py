"""The leaderless scheduler service (docs/protocols.md §4.2; river's service shape).

Every control replica runs one, as its ``scheduler`` lifecycle (``serve/lifecycle.py``'s
``PeriodicService`` around ``run_once``: the period, the backoff after a failed tick and the
stop budget are that loop's). A tick (``run_once``) is one short transaction: it reads at
most ``page_size`` due tasks from the next-fire index (``next_fire_at <= now()`` by the
database's clock, enabled, not removed; ``FOR UPDATE SKIP LOCKED``, so replicas split the
due tasks and never wait on each other), fires each (``firing.fire_due_task``: ledger rows,
the run, the compare-and-set advance) inside its own savepoint, and commits. A task whose work
fails is rolled back alone and stays due. The cost of a tick is what is due, never the number
of tasks. Correctness never depends on a leader: the slot's unique run, the row lock and the
``schedule_version`` compare-and-set make any number of replicas fire each slot once.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.scheduling.firing import fire_due_task
from qinglong.control.scheduling.run_creation import queries
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Engine

_log = logging.getLogger(__name__)

TICK_PERIOD_S_DEFAULT = 1.0
PAGE_SIZE_DEFAULT = 256
BACKLOG_LIMIT_DEFAULT = 1
SLOT_SCAN_LIMIT_DEFAULT = 3600
_KEPT_ERRORS = 5


@dataclass(frozen=True)
class Config:
    """Scheduler settings; ``validate`` (called by the constructor) raises ValidationError.

    ``tick_period_s``: seconds between ticks when the last one was not a full page (> 0;
    serve ticks at ``--scheduler-tick-ms``).
    ``page_size``: due tasks one tick handles at most (1..10,000); a full page ticks again
    at once. ``backlog_limit``: policy ``allow`` records ``backlog_full`` instead of a run
    while the task has this many runs queued (>= 1; the local profile's bound is 1).
    ``slot_scan_limit``: downtime slots counted per task per tick (>= 1); a longer downtime
    is recorded over several ticks into one merged row.
    """

    tick_period_s: float = TICK_PERIOD_S_DEFAULT
    page_size: int = PAGE_SIZE_DEFAULT
    backlog_limit: int = BACKLOG_LIMIT_DEFAULT
    slot_scan_limit: int = SLOT_SCAN_LIMIT_DEFAULT

    def validate(self) -> None:
        """Raise ValidationError naming the first field out of range."""
        if not self.tick_period_s > 0:
            raise ValidationError("tick_period_s", f"{self.tick_period_s} s must be > 0")
        if not 1 <= self.page_size <= 10_000:
            raise ValidationError("page_size", f"{self.page_size} outside 1..10000")
        if self.backlog_limit < 1:
            raise ValidationError("backlog_limit", f"{self.backlog_limit} must be >= 1")
        if self.slot_scan_limit < 1:
            raise ValidationError("slot_scan_limit", f"{self.slot_scan_limit} must be >= 1")


@dataclass(frozen=True)
class TickResult:
    """What one tick did. ``tasks``: due tasks whose work committed; ``failed``: tasks whose
    work was rolled back (they stay due); ``page_full``: the due read filled its page (more
    may be due). ``outcomes``: slot counts by outcome (``run_created``, ``skipped_active``,
    ``backlog_full``, ``skipped_downtime``, ``already_served``, ``unschedulable``);
    ``result["run_created"]`` reads one, 0 when absent."""

    tasks: int = 0
    failed: int = 0
    page_full: bool = False
    outcomes: Mapping[str, int] = field(default_factory=dict)

    def __getitem__(self, outcome: str) -> int:
        return self.outcomes.get(outcome, 0)


class Scheduler:
    """The scheduler lifecycle of one control replica (docs/protocols.md §4.2, §4.5).

    ``engine``: a control engine (``db.engine.create_engine``). ``run_once`` is one tick;
    the replica runs it in a ``PeriodicService`` (``serve/replica.py``), which owns the
    thread, the backoff after a failed tick and the stop. Raises ValidationError for a bad
    ``config``.
    """

    def __init__(self, engine: Engine, config: Config | None = None) -> None:
        self.config = config or Config()
        self.config.validate()
        self._engine = engine
        self.last_errors: deque[str] = deque(maxlen=_KEPT_ERRORS)

    def run_once(self) -> TickResult:
        """One tick: at most ``page_size`` due tasks in one transaction (module docstring).

        Raises the database's errors (SQLAlchemy ``OperationalError`` and friends) when the
        due read or the commit fails; a failure inside one task is rolled back to its
        savepoint, counted in ``failed`` and kept in ``last_errors``.
        """
        cfg = self.config
        outcomes: Counter[str] = Counter()
        done = failed = 0
        with self._engine.begin() as conn:
            run_named(conn, queries()["due_tasks_plan"])  # bounded without statistics
            due = run_named(conn, queries()["due_tasks"],
                            {"limit": cfg.page_size}).mappings().all()
            run_named(conn, queries()["due_tasks_unpin"])
            for task in due:
                savepoint = conn.begin_nested()
                try:
                    counts = fire_due_task(conn, task, backlog_limit=cfg.backlog_limit,
                                           slot_scan_limit=cfg.slot_scan_limit)
                except Exception as exc:  # one task's failure never blocks the others
                    savepoint.rollback()
                    failed += 1
                    self._note_error(f"task {task['id']}: {type(exc).__name__}: {exc}")
                else:
                    savepoint.commit()
                    outcomes.update(counts)
                    done += 1
        return TickResult(done, failed, len(due) == cfg.page_size, dict(outcomes))

    def _note_error(self, message: str) -> None:
        self.last_errors.append(message)
        _log.warning("scheduler: %s", message)
