"""Retry decisions: capped, jittered backoff (docs/architecture.md §2; case C13: no overflow)."""

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

    Equal jitter: a uniform draw over ``[ceiling / 2, ceiling]`` where ``ceiling = min(cap_s,
    base_s * 2**(failures-1))`` (issue 10 item 6, case C19). The exponent is clamped before
    exponentiation, so any count (1,000 included) gives at most ``cap_s`` without overflow
    (case C13). The draw is continuous at every step: no share of the retries lands on the
    floor by construction (the earlier ``max(base/2, ceiling*u)`` put half of all first
    retries exactly on ``base/2``), and a retry is never sooner than half its ceiling.
    ``rng`` defaults to the module's generator. Raises nothing for any ``failures``.
    """
    exponent = min(max(failures - 1, 0), _MAX_EXPONENT)
    ceiling = min(cap_s, base_s * float(2**exponent))
    draw = (rng or random).random()
    return ceiling / 2 + (ceiling / 2) * draw


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
