"""The history pruner's duty cycle (docs/operations.md "History pruning"): the rest after a
batch is the batch's own duration scaled by the duty, capped."""

from __future__ import annotations

import pytest

from qinglong.control.history.prune import PAUSE_MAX_S, duty_pause_s
from qinglong.shared.errors import ValidationError


@pytest.mark.parametrize(("batch_s", "duty", "rest_s"), [
    (0.2, 0.25, 0.6), (0.2, 0.5, 0.2), (0.2, 1.0, 0.0), (0.0, 0.25, 0.0), (-1.0, 0.5, 0.0)])
def test_the_rest_scales_with_the_batch(batch_s: float, duty: float, rest_s: float) -> None:
    assert duty_pause_s(batch_s, duty) == pytest.approx(rest_s)


def test_the_rest_is_capped() -> None:
    assert duty_pause_s(60.0, 0.1) == PAUSE_MAX_S
    assert duty_pause_s(60.0, 0.1, cap_s=2.0) == 2.0


@pytest.mark.parametrize("duty", [0.0, -0.5, 1.5])
def test_a_duty_out_of_range_is_refused(duty: float) -> None:
    with pytest.raises(ValidationError):
        duty_pause_s(1.0, duty)
