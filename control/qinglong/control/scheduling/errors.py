"""Typed errors of cluster scheduling (docs/protocols.md §4.2)."""

from __future__ import annotations

from qinglong.shared.errors import ConcurrentUpdateError, ConflictError, NotFoundError


class TaskNotFoundError(NotFoundError):
    """No task has the id given (``code`` ``task_not_found``)."""

    code = "task_not_found"


class TaskDeletedError(ConflictError):
    """The task was removed (``deleted_at`` set): no run may be created for it and it has no
    schedule (``code`` ``task_deleted``)."""

    code = "task_deleted"


class ScheduleAdvanceLostError(ConcurrentUpdateError):
    """The compare-and-set of ``tasks.next_fire_at`` on ``schedule_version`` found another
    version: someone else moved the schedule; this tick's work for the task is rolled back."""

    code = "schedule_advance_lost"


class RunRefusedError(ConflictError):
    """Run now of a task whose concurrency policy is ``forbid`` while a run of it is queued,
    dispatching or running: no run was created (``code`` ``run_refused``). ``number`` and
    ``status``: the run in progress (its number within the task, None for a run without one;
    ``queued``, ``dispatching`` or ``running``), so the refusal can name it."""

    code = "run_refused"

    def __init__(self, message: str, number: int | None = None, status: str = "") -> None:
        super().__init__(message)
        self.number = number
        self.status = status
