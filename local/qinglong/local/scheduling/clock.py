"""Steps of the wall clock, detected against the boot-time clock (issue 10 item 3, case C15,
docs/protocols.md §3.7).

Cron slots are wall-clock instants, but time passes on the monotonic side: when the wall
clock is set back two hours, a stored cursor lies two hours in the future and, left alone,
nothing fires until the wall clock catches up. The scheduler asks this detector at every
tick how far the wall clock moved beyond the time that really passed.

The reference is ``CLOCK_BOOTTIME`` (monotonic, and it keeps counting while the machine is
suspended), so a suspend and resume is downtime, not a step; where it is missing,
``time.monotonic_ns``. Neither is touched by ``settimeofday``, NTP steps or libfaketime
with ``FAKETIME_DONT_FAKE_MONOTONIC=1``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

STEP_TOLERANCE_MS = 2_000
"""A wall-clock move of more than this (ms) beyond the elapsed monotonic time is a step.
NTP slewing moves the wall clock at most 0.5 ms per second, about 3 ms between two ticks
(the serve loop ticks at least every 5 s), and a tick's own latency is far below 2 s."""


def boottime_ms() -> int:
    """Milliseconds of ``CLOCK_BOOTTIME`` (``time.monotonic_ns`` where it does not exist)."""
    clock_id = getattr(time, "CLOCK_BOOTTIME", None)
    if clock_id is None:  # pragma: no cover - Linux has it
        return time.monotonic_ns() // 1_000_000
    return time.clock_gettime_ns(clock_id) // 1_000_000


class WallClockStepDetector:
    """Remembers ``(wall_ms, mono_ms)`` at each observation and reports a step of the wall
    clock since the previous one.

    ``monotonic_ms`` returns monotonic milliseconds (injectable for tests);
    ``tolerance_ms`` is the smallest difference reported (default ``STEP_TOLERANCE_MS``).
    Raises ValueError for a negative tolerance.
    """

    def __init__(
        self,
        tolerance_ms: int = STEP_TOLERANCE_MS,
        monotonic_ms: Callable[[], int] = boottime_ms,
    ) -> None:
        if tolerance_ms < 0:
            raise ValueError("tolerance_ms must be >= 0")
        self.tolerance_ms = tolerance_ms
        self._monotonic_ms = monotonic_ms
        self._last: tuple[int, int] | None = None

    def observe(self, wall_ms: int) -> int:
        """Record the wall clock ``wall_ms`` (Unix ms) read now; return the step since the
        previous observation in ms: ``Δwall − Δmono`` when its size exceeds the tolerance
        (positive: the wall clock jumped forward, negative: back), else 0. The first
        observation returns 0."""
        mono = self._monotonic_ms()
        last, self._last = self._last, (wall_ms, mono)
        if last is None:
            return 0
        step = (wall_ms - last[0]) - (mono - last[1])
        return step if abs(step) > self.tolerance_ms else 0
