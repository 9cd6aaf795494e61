"""Capped, jittered retry backoff (DESIGN.md §2; cases C13: no overflow at any count)."""

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
