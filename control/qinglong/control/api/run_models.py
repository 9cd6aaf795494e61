"""Response models of the run and attempt routes (docs/architecture.md §2 Run, Attempt, Event;
docs/protocols.md §4.5).

An attempt's lease token is a fencing secret of its worker and is never answered; the
worker's completion document is not answered either (only the facts columns hold).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel

RunStatus = Literal["queued", "dispatching", "running", "succeeded", "failed", "cancelled",
                    "timed_out", "lost"]
ACTIVE = frozenset({"queued", "dispatching", "running"})


class RunOut(BaseModel):
    """One run: status, trigger (schedule/manual/boot), its slot for scheduled runs."""

    id: str
    task_id: str
    task_name: str
    number: int | None
    owner: str
    status: str
    trigger: str
    scheduled_for: datetime | None
    not_before: datetime
    attempt_count: int
    cancel_requested_at: datetime | None
    exit_code: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class AttemptOut(BaseModel):
    """One attempt; ``has_log`` says a log object was recorded (read it at
    ``/v1/attempts/{id}/log``); ``worker_name`` is the name the claiming worker incarnation
    gave (``ql3 worker run --name``; null until a worker claimed it)."""

    id: str
    run_id: str
    number: int
    executor: str
    status: str
    worker_incarnation_id: str | None
    worker_name: str | None
    lease_expires_at: datetime | None
    claimed_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    signal: int | None
    reason: str | None
    created_at: datetime
    has_log: bool


class EventOut(BaseModel):
    """One history row of a run (append-only, docs/architecture.md §2)."""

    kind: str
    attempt_id: str | None
    from_status: str | None
    to_status: str
    at: datetime
    detail: dict[str, Any] | None


class RunDetail(RunOut):
    """A run with its attempts (by number) and events (oldest first)."""

    attempts: list[AttemptOut]
    events: list[EventOut]


class RunPage(BaseModel):
    """Newest first; ``next_cursor``: the last id, to pass as ``cursor``."""

    items: list[RunOut]
    next_cursor: str | None
