"""Run and Attempt state machines (docs/architecture.md §2).

The expected tables below are written out by hand from docs/architecture.md §2 rather than read from
the module, so a change to ``statuses.py`` that adds or drops an edge fails here and becomes a
reviewed change in two places.
"""

from __future__ import annotations

import itertools

import pytest

from qinglong.shared.errors import InvalidTransitionError, QinglongError
from qinglong.shared.statuses import (
    ATTEMPT_ACTIVE,
    ATTEMPT_TERMINAL,
    ATTEMPT_TRANSITIONS,
    RETRYABLE_ATTEMPT_OUTCOMES,
    RUN_ACTIVE,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    AttemptStatus,
    Executor,
    RunOwner,
    RunStatus,
    check_attempt_transition,
    check_run_transition,
    run_status_for_attempt,
)

R = RunStatus
A = AttemptStatus

EXPECTED_RUN_EDGES: frozenset[tuple[RunStatus, RunStatus]] = frozenset(
    {
        (R.QUEUED, R.DISPATCHING),
        (R.QUEUED, R.CANCELLED),
        (R.DISPATCHING, R.RUNNING),
        (R.DISPATCHING, R.QUEUED),  # retry: the attempt failed or was lost before it ran
        (R.DISPATCHING, R.FAILED),
        (R.DISPATCHING, R.CANCELLED),
        (R.DISPATCHING, R.TIMED_OUT),
        (R.DISPATCHING, R.LOST),
        (R.RUNNING, R.QUEUED),  # retry after a failed, timed-out or lost attempt
        (R.RUNNING, R.SUCCEEDED),
        (R.RUNNING, R.FAILED),
        (R.RUNNING, R.CANCELLED),
        (R.RUNNING, R.TIMED_OUT),
        (R.RUNNING, R.LOST),
    }
)

EXPECTED_ATTEMPT_EDGES: frozenset[tuple[AttemptStatus, AttemptStatus]] = frozenset(
    {
        (A.CLAIMED, A.STARTING),
        (A.CLAIMED, A.FAILED),
        (A.CLAIMED, A.CANCELLED),
        (A.CLAIMED, A.LOST),
        (A.STARTING, A.RUNNING),
        (A.STARTING, A.FAILED),
        (A.STARTING, A.CANCELLED),
        (A.STARTING, A.TIMED_OUT),
        (A.STARTING, A.LOST),
        (A.RUNNING, A.SUCCEEDED),
        (A.RUNNING, A.FAILED),
        (A.RUNNING, A.CANCELLED),
        (A.RUNNING, A.TIMED_OUT),
        (A.RUNNING, A.LOST),
    }
)

TERMINAL_NAMES = {"succeeded", "failed", "cancelled", "timed_out", "lost"}

ALL_RUN_PAIRS = list(itertools.product(RunStatus, RunStatus))
ALL_ATTEMPT_PAIRS = list(itertools.product(AttemptStatus, AttemptStatus))


def _pair_id(pair: tuple[object, object]) -> str:
    return f"{pair[0]}->{pair[1]}"


# --- the status vocabularies -------------------------------------------------------------


def test_run_status_values_are_the_design_vocabulary() -> None:
    assert [s.value for s in RunStatus] == [
        "queued",
        "dispatching",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "timed_out",
        "lost",
    ]


def test_attempt_status_values_are_the_design_vocabulary() -> None:
    assert [s.value for s in AttemptStatus] == [
        "claimed",
        "starting",
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "timed_out",
        "lost",
    ]


def test_owner_and_executor_values_are_stable_strings() -> None:
    assert {o.value for o in RunOwner} == {"runtime", "legacy"}
    assert {e.value for e in Executor} == {"local_process", "remote_worker"}


def test_terminal_and_active_sets_partition_the_statuses() -> None:
    assert {s.value for s in RUN_TERMINAL} == TERMINAL_NAMES
    assert {s.value for s in ATTEMPT_TERMINAL} == TERMINAL_NAMES
    assert {R.DISPATCHING, R.RUNNING} == RUN_ACTIVE
    assert {A.CLAIMED, A.STARTING, A.RUNNING} == ATTEMPT_ACTIVE
    assert not RUN_ACTIVE & RUN_TERMINAL
    assert set(AttemptStatus) == ATTEMPT_ACTIVE | ATTEMPT_TERMINAL
    assert RUN_ACTIVE | RUN_TERMINAL | {R.QUEUED} == set(RunStatus)


# --- the tables themselves ---------------------------------------------------------------


def test_run_transition_table_is_exactly_the_designed_edges() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus)
    table = {(a, b) for a, targets in RUN_TRANSITIONS.items() for b in targets}
    assert table == EXPECTED_RUN_EDGES


def test_attempt_transition_table_is_exactly_the_designed_edges() -> None:
    assert set(ATTEMPT_TRANSITIONS) == set(AttemptStatus)
    table = {(a, b) for a, targets in ATTEMPT_TRANSITIONS.items() for b in targets}
    assert table == EXPECTED_ATTEMPT_EDGES


@pytest.mark.parametrize("status", sorted(RUN_TERMINAL))
def test_terminal_run_status_has_no_exit(status: RunStatus) -> None:
    assert RUN_TRANSITIONS[status] == frozenset()
    for target in RunStatus:
        with pytest.raises(InvalidTransitionError):
            check_run_transition(status, target)


@pytest.mark.parametrize("status", sorted(ATTEMPT_TERMINAL))
def test_terminal_attempt_status_has_no_exit(status: AttemptStatus) -> None:
    assert ATTEMPT_TRANSITIONS[status] == frozenset()
    for target in AttemptStatus:
        with pytest.raises(InvalidTransitionError):
            check_attempt_transition(status, target)


def test_run_retry_edges_return_to_queued() -> None:
    check_run_transition(R.RUNNING, R.QUEUED)
    check_run_transition(R.DISPATCHING, R.QUEUED)
    assert R.QUEUED in RUN_TRANSITIONS[R.RUNNING]
    assert R.QUEUED in RUN_TRANSITIONS[R.DISPATCHING]


def test_attempts_never_retry_in_place() -> None:
    """A retry is a new attempt: no attempt status leads back to an earlier one."""
    order = [A.CLAIMED, A.STARTING, A.RUNNING]
    for later_index, later in enumerate(order):
        for earlier in order[: later_index + 1]:
            with pytest.raises(InvalidTransitionError):
                check_attempt_transition(later, earlier)


def test_no_status_transitions_to_itself() -> None:
    for run_status in RunStatus:
        with pytest.raises(InvalidTransitionError):
            check_run_transition(run_status, run_status)
    for attempt_status in AttemptStatus:
        with pytest.raises(InvalidTransitionError):
            check_attempt_transition(attempt_status, attempt_status)


def test_a_queued_run_cannot_skip_dispatching() -> None:
    for target in (R.RUNNING, R.SUCCEEDED, R.FAILED, R.TIMED_OUT, R.LOST):
        with pytest.raises(InvalidTransitionError):
            check_run_transition(R.QUEUED, target)


def test_retryable_outcomes_are_failed_timed_out_and_lost() -> None:
    assert {A.FAILED, A.TIMED_OUT, A.LOST} == RETRYABLE_ATTEMPT_OUTCOMES
    assert RETRYABLE_ATTEMPT_OUTCOMES <= ATTEMPT_TERMINAL


# --- every pair, allowed or refused ------------------------------------------------------


@pytest.mark.parametrize("pair", ALL_RUN_PAIRS, ids=_pair_id)
def test_run_transition_is_allowed_iff_in_table(pair: tuple[RunStatus, RunStatus]) -> None:
    current, target = pair
    if pair in EXPECTED_RUN_EDGES:
        check_run_transition(current, target)
        return
    with pytest.raises(InvalidTransitionError) as info:
        check_run_transition(current, target)
    err = info.value
    assert (err.entity, err.current, err.target) == ("run", current.value, target.value)
    assert err.code == "invalid_transition"
    assert isinstance(err, QinglongError)


@pytest.mark.parametrize("pair", ALL_ATTEMPT_PAIRS, ids=_pair_id)
def test_attempt_transition_is_allowed_iff_in_table(
    pair: tuple[AttemptStatus, AttemptStatus],
) -> None:
    current, target = pair
    if pair in EXPECTED_ATTEMPT_EDGES:
        check_attempt_transition(current, target)
        return
    with pytest.raises(InvalidTransitionError) as info:
        check_attempt_transition(current, target)
    err = info.value
    assert (err.entity, err.current, err.target) == ("attempt", current.value, target.value)


def test_every_pair_enumeration_covers_the_whole_square() -> None:
    assert len(ALL_RUN_PAIRS) == 64
    assert len(ALL_ATTEMPT_PAIRS) == 64
    assert len(EXPECTED_RUN_EDGES) == 14
    assert len(EXPECTED_ATTEMPT_EDGES) == 14


# --- run status from the last attempt's outcome --------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (A.SUCCEEDED, R.SUCCEEDED),
        (A.FAILED, R.FAILED),
        (A.CANCELLED, R.CANCELLED),
        (A.TIMED_OUT, R.TIMED_OUT),
        (A.LOST, R.LOST),
    ],
)
def test_run_status_for_attempt_is_the_last_attempts_outcome(
    outcome: AttemptStatus, expected: RunStatus
) -> None:
    result = run_status_for_attempt(outcome)
    assert result is expected
    # The run can actually reach that status from running.
    check_run_transition(R.RUNNING, result)


@pytest.mark.parametrize("outcome", [A.CLAIMED, A.STARTING, A.RUNNING])
def test_run_status_for_active_attempt_is_refused(outcome: AttemptStatus) -> None:
    with pytest.raises(InvalidTransitionError) as info:
        run_status_for_attempt(outcome)
    assert info.value.entity == "run"
    assert info.value.target == outcome.value
