"""Retry backoff: capped before exponentiation, jittered, never immediate (case C13)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.shared.backoff import retry_delay_s, retry_not_before_ms


@pytest.mark.parametrize("failures", [1, 2, 10, 64, 1000, 10**9])
def test_delay_stays_within_half_its_ceiling_and_the_cap(failures: int) -> None:
    for seed in range(50):
        delay = retry_delay_s(failures, base_s=5, cap_s=600, rng=random.Random(seed))
        assert min(600, 5 * 2.0 ** min(failures - 1, 32)) / 2 <= delay <= 600


def test_a_thousand_failures_still_jitter_below_the_cap() -> None:
    delays = {retry_delay_s(1000, base_s=5, cap_s=86_400, rng=random.Random(s)) for s in range(20)}
    assert len(delays) > 1 and max(delays) <= 86_400


def test_the_first_retry_waits_about_the_base() -> None:
    delays = [retry_delay_s(1, base_s=4, cap_s=600, rng=random.Random(s)) for s in range(100)]
    assert min(delays) >= 2 and max(delays) <= 4


@given(st.integers(min_value=1, max_value=5), st.integers(min_value=1, max_value=5),
       st.booleans(), st.booleans())
def test_retry_needs_a_retryable_outcome_attempts_left_and_no_cancel(
    number: int, max_attempts: int, retryable: bool, cancelled: bool
) -> None:
    at = retry_not_before_ms(outcome_retryable=retryable, attempt_number=number,
                             max_attempts=max_attempts, cancel_requested=cancelled, now_ms=1000)
    if retryable and number < max_attempts and not cancelled:
        assert at is not None and at > 1000
    else:
        assert at is None



@pytest.mark.parametrize(("failures", "ceiling"), [(1, 60.0), (3, 240.0), (1000, 86_400.0)])
def test_delays_spread_uniformly_over_the_upper_half(failures: int, ceiling: float) -> None:
    """Case C19: 500 rows failing at the same moment come back spread over the whole range
    [ceiling/2, ceiling]; none lands on the floor by construction."""
    rng = random.Random(19)
    delays = [retry_delay_s(failures, base_s=60, cap_s=86_400, rng=rng) for _ in range(500)]
    low = ceiling / 2
    assert all(low <= d <= ceiling for d in delays)
    # no point mass anywhere: the most common value is a single draw
    assert max(delays.count(d) for d in set(delays)) == 1
    assert sum(1 for d in delays if d == low) == 0
    # each tenth of the range holds roughly a tenth of the draws (uniform: 50 expected)
    bins = [0] * 10
    for d in delays:
        bins[min(9, int((d - low) / (ceiling - low) * 10))] += 1
    assert min(bins) >= 25 and max(bins) <= 80, bins
