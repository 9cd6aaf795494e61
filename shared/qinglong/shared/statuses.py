"""Run and Attempt status machines: the one table of allowed transitions (docs/architecture.md §2).

A run goes ``queued -> dispatching -> running -> terminal``. When an attempt fails, times out
or is lost and the task allows more attempts, the run returns to ``queued`` (retry) with a
``not_before`` time. An attempt goes ``claimed -> starting -> running -> terminal``.
"""

from __future__ import annotations

from enum import StrEnum

from qinglong.shared.errors import InvalidTransitionError


class RunStatus(StrEnum):
    """Status of a Run (one execution of a task, possibly over several attempts)."""

    QUEUED = "queued"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"


class AttemptStatus(StrEnum):
    """Status of an Attempt (one try of a run on one executor)."""

    CLAIMED = "claimed"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"


class RunOwner(StrEnum):
    """Who may act on a run: this runtime, or nobody (imported from Qinglong 2.x)."""

    RUNTIME = "runtime"
    LEGACY = "legacy"


class Executor(StrEnum):
    """Where an attempt executes."""

    LOCAL_PROCESS = "local_process"
    REMOTE_WORKER = "remote_worker"


_R = RunStatus
_A = AttemptStatus

RUN_TERMINAL: frozenset[RunStatus] = frozenset(
    {_R.SUCCEEDED, _R.FAILED, _R.CANCELLED, _R.TIMED_OUT, _R.LOST}
)
ATTEMPT_TERMINAL: frozenset[AttemptStatus] = frozenset(
    {_A.SUCCEEDED, _A.FAILED, _A.CANCELLED, _A.TIMED_OUT, _A.LOST}
)
ATTEMPT_ACTIVE: frozenset[AttemptStatus] = frozenset({_A.CLAIMED, _A.STARTING, _A.RUNNING})
RUN_ACTIVE: frozenset[RunStatus] = frozenset({_R.DISPATCHING, _R.RUNNING})

RUN_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    _R.QUEUED: frozenset({_R.DISPATCHING, _R.CANCELLED}),
    # dispatching -> queued: the attempt was lost or failed before it ran and may retry.
    _R.DISPATCHING: frozenset(
        {_R.RUNNING, _R.QUEUED, _R.FAILED, _R.CANCELLED, _R.TIMED_OUT, _R.LOST}
    ),
    # running -> queued: retry after a failed, timed-out or lost attempt.
    _R.RUNNING: frozenset(
        {_R.QUEUED, _R.SUCCEEDED, _R.FAILED, _R.CANCELLED, _R.TIMED_OUT, _R.LOST}
    ),
    _R.SUCCEEDED: frozenset(),
    _R.FAILED: frozenset(),
    _R.CANCELLED: frozenset(),
    _R.TIMED_OUT: frozenset(),
    _R.LOST: frozenset(),
}

ATTEMPT_TRANSITIONS: dict[AttemptStatus, frozenset[AttemptStatus]] = {
    _A.CLAIMED: frozenset({_A.STARTING, _A.FAILED, _A.CANCELLED, _A.LOST}),
    _A.STARTING: frozenset({_A.RUNNING, _A.FAILED, _A.CANCELLED, _A.TIMED_OUT, _A.LOST}),
    _A.RUNNING: frozenset({_A.SUCCEEDED, _A.FAILED, _A.CANCELLED, _A.TIMED_OUT, _A.LOST}),
    _A.SUCCEEDED: frozenset(),
    _A.FAILED: frozenset(),
    _A.CANCELLED: frozenset(),
    _A.TIMED_OUT: frozenset(),
    _A.LOST: frozenset(),
}

# Attempt outcomes after which a run may return to ``queued`` when attempts remain.
RETRYABLE_ATTEMPT_OUTCOMES: frozenset[AttemptStatus] = frozenset(
    {_A.FAILED, _A.TIMED_OUT, _A.LOST}
)


def check_run_transition(current: RunStatus, target: RunStatus) -> None:
    """Raise :class:`InvalidTransitionError` unless ``current -> target`` is in the table."""
    if target not in RUN_TRANSITIONS[current]:
        raise InvalidTransitionError("run", current.value, target.value)


def check_attempt_transition(current: AttemptStatus, target: AttemptStatus) -> None:
    """Raise :class:`InvalidTransitionError` unless ``current -> target`` is in the table."""
    if target not in ATTEMPT_TRANSITIONS[current]:
        raise InvalidTransitionError("attempt", current.value, target.value)


def run_status_for_attempt(outcome: AttemptStatus) -> RunStatus:
    """The run's terminal status is its last attempt's (docs/architecture.md §2)."""
    if outcome not in ATTEMPT_TERMINAL:
        raise InvalidTransitionError("run", "active", outcome.value)
    return RunStatus(outcome.value)
