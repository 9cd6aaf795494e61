"""Self-fencing of one attempt's lease (docs/protocols.md §4.2 "Self-fencing").

The worker's deadline for an attempt is the monotonic time at which the last successful
renewal (the claim, then each heartbeat) was *sent*, plus the lease granted by that renewal,
minus a margin. Control's lease started no earlier than the send, so once this deadline passes
the database's lease may be close to expiring: the worker kills the attempt's group first, and
no retry of any write for that attempt runs past the deadline.

A fence that has passed stays passed: once the deadline is behind ``clock.now()`` the wrapper
has killed (or is killing) the attempt's group on its own copy of the deadline, so a renewal
whose answer is handled only then — a worker frozen (SIGSTOP) with a heartbeat in flight, its
answer read when it resumes — revives nothing (integration/worker/test_worker_fencing.py
``test_frozen_worker_with_a_heartbeat_in_flight_never_completes``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from qinglong.worker import clock

MIN_MARGIN_MS = 1000


def fence_margin_ms(lease_ms: int) -> int:
    """The safety margin (ms) subtracted from a lease: ``max(1000, lease_ms // 10)``."""
    return max(MIN_MARGIN_MS, lease_ms // 10)


class LeaseFence:
    """Tracks one attempt's self-fencing deadline on CLOCK_BOOTTIME (seconds, clock.py).

    ``sent_at`` values are ``clock.now()`` readings taken when the renewing request was
    sent; ``lease_ms`` is the lease that request obtained (ms). Thread-safe.
    """

    def __init__(self, sent_at: float, lease_ms: int) -> None:
        self._lock = threading.Lock()
        self._deadline = self._compute(sent_at, lease_ms)
        self._listeners: list[Callable[[float], None]] = []

    def subscribe(self, listener: Callable[[float], None]) -> None:
        """Call ``listener(deadline)`` now and each time the deadline moves forward (the
        attempt's wrapper enforces it too, should the worker freeze: group_wrapper.py)."""
        with self._lock:
            self._listeners.append(listener)
            deadline = self._deadline
        listener(deadline)

    @staticmethod
    def _compute(sent_at: float, lease_ms: int) -> float:
        return sent_at + (lease_ms - fence_margin_ms(lease_ms)) / 1000.0

    @property
    def deadline(self) -> float:
        """The CLOCK_BOOTTIME time (s) after which the attempt's group must be dead."""
        with self._lock:
            return self._deadline

    def renewed(self, sent_at: float, lease_ms: int, now: float | None = None) -> bool:
        """Record a successful renewal sent at ``sent_at`` granting ``lease_ms``; the deadline
        only moves forward (a late answer of an older request never shortens it wrongly, nor
        extends past what that request earned). Ignored once the deadline has passed (the
        fence is final; see the module docstring); returns False then, True otherwise.
        ``now`` defaults to ``clock.now()``."""
        candidate = self._compute(sent_at, lease_ms)
        with self._lock:
            if (clock.now() if now is None else now) >= self._deadline:
                return False
            moved = candidate > self._deadline
            self._deadline = max(self._deadline, candidate)
            listeners = list(self._listeners) if moved else []
        for listener in listeners:
            listener(candidate)
        return True

    def expired(self, now: float | None = None) -> bool:
        """True when the deadline has passed (``now`` defaults to ``clock.now()``)."""
        return (clock.now() if now is None else now) >= self.deadline

    def remaining_s(self) -> float:
        """Seconds left before the deadline (≤ 0 when passed)."""
        return self.deadline - clock.now()
