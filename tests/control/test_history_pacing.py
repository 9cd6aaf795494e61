"""The history pruner's duty cycle (docs/operations.md "History pruning"): the rest after a
batch is the batch's own duration scaled by the duty, capped; a pass prunes until nothing is
due, with no cap on its batches, at the duty."""

from __future__ import annotations

from typing import Any, cast

import pytest

from qinglong.control.history.prune import (
    BATCH_DEFAULT,
    DUTY_DEFAULT,
    PAUSE_MAX_S,
    Batch,
    PacedPruner,
    duty_pause_s,
)
from qinglong.shared.errors import ValidationError


@pytest.mark.parametrize(("batch_s", "duty", "rest_s"), [
    (0.2, 0.25, 0.6), (0.2, 0.5, 0.2), (0.2, 1.0, 0.0), (0.0, 0.25, 0.0), (-1.0, 0.5, 0.0)])
def test_the_rest_scales_with_the_batch(batch_s: float, duty: float, rest_s: float) -> None:
    assert duty_pause_s(batch_s, duty) == pytest.approx(rest_s)


def test_the_rest_is_capped() -> None:
    assert duty_pause_s(600.0, 0.1) == PAUSE_MAX_S
    assert duty_pause_s(60.0, 0.1, cap_s=2.0) == 2.0


@pytest.mark.parametrize("duty", [0.0, -0.5, 1.5])
def test_a_duty_out_of_range_is_refused(duty: float) -> None:
    with pytest.raises(ValidationError):
        duty_pause_s(1.0, duty)


# run_pass over a fake batch and a fake clock: the pace is arithmetic on the batches' durations
class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def rest(self, seconds: float) -> bool:
        self.now += seconds
        return False


def _pruner(due: int, batch_s: float, clock: _Clock, *, duty: float = DUTY_DEFAULT,
            limit: int = BATCH_DEFAULT) -> PacedPruner:
    """A PacedPruner whose batches each delete up to ``limit`` of ``due`` runs in
    ``batch_s`` seconds of the fake clock."""
    left = [due]

    def batch(_engine: Any, _owner: str, n: int) -> Batch:
        clock.now += batch_s
        runs = min(n, left[0])
        left[0] -= runs
        return Batch(n, runs, runs, runs, 3 * runs, runs, 0)

    return PacedPruner(cast(Any, None), "replica-一", limit=limit, duty=duty, batch=batch,
                       clock=clock, rest=clock.rest)


def test_a_pass_prunes_a_backlog_past_the_old_hourly_cap_at_the_duty() -> None:
    clock = _Clock()
    done = _pruner(10_000, 0.025, clock).run_pass()  # 2.5 × the 4,000 runs of 40 batches
    assert (done.batches, done.runs, done.events) == (101, 10_000, 30_000)
    assert done.caught_up and not done.held
    # the last batch (not full) takes no rest; every full one keeps to the duty
    assert done.busy_s / (done.busy_s + done.rested_s) == pytest.approx(
        101 / (101 + 100 * (1 - DUTY_DEFAULT) / DUTY_DEFAULT))
    assert clock.now == pytest.approx(done.busy_s + done.rested_s)


@pytest.mark.parametrize(("batch_s", "runs_per_hour"), [
    (0.025, 40_000),  # this host's 100-run batch under load 4-8: ten times the old cap
    (0.5, 3_600),  # twenty times slower: still a task every second
])
def test_the_default_pace_keeps_up_with_a_busy_cluster(batch_s: float,
                                                       runs_per_hour: int) -> None:
    clock = _Clock()
    done = _pruner(100_000, batch_s, clock).run_pass()
    assert done.runs == 100_000
    assert done.runs / clock.now * 3600 > runs_per_hour


def test_the_default_duty_leaves_claims_99_percent_of_the_wall_time() -> None:
    clock = _Clock()
    done = _pruner(1_000_000, 0.025, clock).run_pass()
    assert done.busy_s / clock.now < 0.01


def test_a_stop_ends_the_pass_after_the_batch_in_flight() -> None:
    clock = _Clock()
    pruner = _pruner(10_000, 0.025, clock)

    def rest(seconds: float) -> bool:
        pruner.request_stop()
        return True

    pruner._rest = rest
    done = pruner.run_pass()
    assert (done.batches, done.runs, done.caught_up, done.held) == (1, 100, False, False)


def test_a_pass_ends_when_another_replica_holds_the_job() -> None:
    pruner = PacedPruner(cast(Any, None), "replica-二", batch=lambda _e, _o, _n: None)
    done = pruner.run_pass()
    assert (done.batches, done.held, done.caught_up) == (0, True, False)
