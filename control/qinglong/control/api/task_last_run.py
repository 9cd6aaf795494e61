"""Each task's last run for the task answers (issue 12 item 2, issue 13 item 2): what
``ql3 cluster task list``/``show`` print as ``succeeded 1m 05s``, in ``ql3 local``'s terms.

Rules held here:

- a task's last run is its newest run, whatever its status — a queued or running one
  included, as ``ql3 local`` shows it; ``None``: it never ran. Newest is the highest
  ``number``: numbers are handed out in creation order with no gap (``tasks.run_counter``,
  ``scheduling/run_creation.py``); runs without one (rows older than migration 0005) are
  never a last run;
- ``duration_s`` is seconds from the run's start (its first attempt's, ``runs.started_at``)
  to its end, or to the database's ``now()`` while it is queued, dispatching or running;
  ``None`` before it started (or a finished run that has no finish time);
- a page of tasks reads every task's last run in the SAME query (a ``LATERAL`` join, one
  backward step of ``runs_task_number_idx (task_id, number) WHERE number IS NOT NULL``,
  migration 0005, per task), never one query per task (no N+1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Select, case, cast, extract, func, literal, select, true
from sqlalchemy.types import Float

from qinglong.control.api.run_models import ACTIVE
from qinglong.control.api.task_models import LastRunOut
from qinglong.control.db.tables import runs, tasks

if TYPE_CHECKING:
    from sqlalchemy import Connection, RowMapping

PREFIX = "last_run_"  # labels of the joined columns, apart from the task's own


def _newest_run(task_id: ColumnElement[Any]) -> Select[Any]:
    """The newest run of the task ``task_id`` names (a column or a bound value): id,
    number, status, finished_at and duration_s, labelled ``last_run_*``."""
    end = func.coalesce(runs.c.finished_at,
                        case((runs.c.status.in_(sorted(ACTIVE)), func.now())))
    took = cast(extract("epoch", end - runs.c.started_at), Float)
    return (select(runs.c.id.label(f"{PREFIX}id"), runs.c.number.label(f"{PREFIX}number"),
                   runs.c.status.label(f"{PREFIX}status"),
                   runs.c.finished_at.label(f"{PREFIX}finished_at"),
                   took.label(f"{PREFIX}duration_s"))
            # by number: only runs_task_number_idx gives this order, so the planner never
            # walks the primary key backward, filtering on the task, instead
            .where(runs.c.task_id == task_id, runs.c.number.is_not(None))
            .order_by(runs.c.number.desc()).limit(1))


def with_last_run(query: Select[Any]) -> Select[Any]:
    """``query`` (a select over ``tasks``) with each task's newest run as ``last_run_*``
    columns, NULL for a task that never ran: one ``LEFT JOIN LATERAL``, so a page of
    tasks stays one query."""
    newest = _newest_run(tasks.c.id).lateral("last_run")
    return query.add_columns(*newest.c).outerjoin(newest, true())


def last_run_out(row: RowMapping) -> LastRunOut | None:
    """The ``last_run`` answer from a row of :func:`with_last_run` (or of
    :func:`last_run_row`); None when the task never ran."""
    if row[f"{PREFIX}id"] is None:
        return None
    took = row[f"{PREFIX}duration_s"]
    return LastRunOut(id=str(row[f"{PREFIX}id"]), number=row[f"{PREFIX}number"],
                      status=row[f"{PREFIX}status"], finished_at=row[f"{PREFIX}finished_at"],
                      duration_s=None if took is None else max(0.0, float(took)))


def last_run_of(conn: Connection, task_id: str) -> LastRunOut | None:
    """One task's newest run (one indexed query), as :func:`last_run_out` answers it."""
    row = conn.execute(_newest_run(literal(task_id, runs.c.task_id.type))).mappings().first()
    return None if row is None else last_run_out(row)
