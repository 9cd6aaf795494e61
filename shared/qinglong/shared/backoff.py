"""Retry decisions: capped, jittered backoff (DESIGN.md §2; case C13: no overflow)."""

from __future__ import annotations

import random

RETRY_BASE_S = 5.0
RETRY_CAP_S = 600.0
_MAX_EXPONENT = 32


def retry_delay_s(
    failures: int,
    *,
    base_s: float = RETRY_BASE_S,
    cap_s: float = RETRY_CAP_S,
    rng: random.Random | None = None,
) -> float:
    """Seconds to wait before retry number ``failures`` (1 = first retry).

    Full jitter over ``min(cap, base * 2**(failures-1))``, with the exponent clamped before
    exponentiation so any count (1,000 included) gives at most ``cap_s`` without overflow.
    The result is at least ``base_s / 2`` so a retry is never immediate.
    """
    exponent = min(max(failures - 1, 0), _MAX_EXPONENT)
    ceiling = min(cap_s, base_s * float(2**exponent))
    draw = (rng or random).random()
    return max(base_s / 2, ceiling * draw) if ceiling > base_s / 2 else ceiling


def retry_not_before_ms(
    *,
    outcome_retryable: bool,
    attempt_number: int,
    max_attempts: int,
    cancel_requested: bool,
    now_ms: int,
    base_s: float = RETRY_BASE_S,
    cap_s: float = RETRY_CAP_S,
) -> int | None:
    """When the run goes back to ``queued`` after this attempt, or None for no retry.

    A retry needs a retryable outcome (failed, timed out, lost), attempts left, and no
    cancel intent. The one rule shared by the coordinator and the startup reconciler.
    """
    if not outcome_retryable or attempt_number >= max_attempts or cancel_requested:
        return None
    return now_ms + round(retry_delay_s(attempt_number, base_s=base_s, cap_s=cap_s) * 1000)
