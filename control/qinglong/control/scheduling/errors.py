"""Typed errors of cluster scheduling (DESIGN.md §4.2)."""

from __future__ import annotations

from qinglong.shared.errors import ConflictError, NotFoundError


class TaskNotFoundError(NotFoundError):
    """No task has the id given (``code`` ``task_not_found``)."""

    code = "task_not_found"


class TaskDeletedError(ConflictError):
    """The task was removed (``deleted_at`` set): no run may be created for it and it has no
    schedule (``code`` ``task_deleted``)."""

    code = "task_deleted"
