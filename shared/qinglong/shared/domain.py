"""Domain records: Task, Run, Attempt, Event (docs/architecture.md §2).

Times are integer Unix milliseconds (``*_at_ms``); durations say their unit in the name.
These are plain immutable records; storage adapters build them from rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from qinglong.shared.statuses import AttemptStatus, Executor, RunOwner, RunStatus


class ConcurrencyPolicy(StrEnum):
    """What a due slot does while the task has an active run (docs/protocols.md §3.7)."""

    FORBID = "forbid"
    ALLOW = "allow"
    REPLACE = "replace"


class Trigger(StrEnum):
    """Why a run exists."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    BOOT = "boot"


@dataclass(frozen=True, slots=True)
class Task:
    """A task definition.

    ``schedule`` is a 5-field cron, a 6-field cron with seconds first, ``@boot`` or ``@once``.
    ``timeout_s`` of ``None`` means no timeout. ``env`` maps names to values.
    """

    id: str
    name: str
    argv: tuple[str, ...]
    schedule: str
    timezone: str = "UTC"
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float | None = None
    max_attempts: int = 1
    concurrency: ConcurrencyPolicy = ConcurrencyPolicy.FORBID
    log_retention_days: int | None = None
    labels: tuple[str, ...] = ()
    enabled: bool = True
    misfire_grace_s: int = 60
    schedule_cursor_ms: int | None = None
    version: int = 1
    created_at_ms: int = 0
    updated_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a run. ``handle`` is the encoded ``ql3lp1`` handle once saved."""

    id: str
    run_id: str
    number: int
    status: AttemptStatus
    executor: Executor
    version: int
    handle: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    log_path: str | None = None
    deadline_at_ms: int | None = None
    created_at_ms: int = 0
    started_at_ms: int | None = None
    finished_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Run:
    """One execution of a task; its terminal status is its last attempt's."""

    id: str
    task_id: str
    task_name: str
    status: RunStatus
    owner: RunOwner
    trigger: Trigger
    version: int
    scheduled_at_ms: int | None
    not_before_ms: int
    created_at_ms: int
    finished_at_ms: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    cancel_requested: bool = False
    attempts: tuple[Attempt, ...] = ()
    number: int | None = None  # per task name, from 1 (local profile; None: not numbered)


@dataclass(frozen=True, slots=True)
class Event:
    """An append-only history row, written in the transaction of the change it records."""

    id: str
    at_ms: int
    kind: str
    task_id: str | None
    run_id: str | None
    attempt_id: str | None
    from_status: str | None
    to_status: str | None
    detail: str | None
