"""One-timer maintenance lifecycles (ADR-0069 §5–§6; docs/protocols.md §3.5–§3.6).

:class:`PeriodicLifecycle` is one daemon thread that runs a bounded job every ``tick_s``
seconds, never overlapping itself (a tick already running makes another one a no-op), with
idempotent ``start``/``stop`` and a stop that waits at most ``stop_wait_s``.
:class:`CleanupLifecycle` runs the receipt cleanup scanner one page per tick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from qinglong.local.recovery.cleanup_scanner import (
    LocalCompletionReceiptCleanupScanner,
    Outcome,
    PageResult,
)
from qinglong.local.storage.journal import Position

log = logging.getLogger(__name__)

_QUIET = frozenset({Outcome.KEPT, Outcome.WAITING})  # nothing done: not worth a log line

T = TypeVar("T")
Job = Callable[[Callable[[], bool]], T]
"""A bounded unit of work; it gets ``should_stop()`` to check between items."""


class PeriodicLifecycle(Generic[T]):
    """One timer thread calling ``job(should_stop)`` every ``tick_s`` seconds.

    The first tick comes ``first_delay_s`` (default ``tick_s``) after :meth:`start`. A
    job that raises is logged by error class and counted in ``errors``; the timer lives on.
    Creating it starts nothing (assembly has no side effects, docs/protocols.md §3.6).
    """

    def __init__(
        self,
        name: str,
        job: Job[T],
        *,
        tick_s: float,
        stop_wait_s: float,
        first_delay_s: float | None = None,
    ) -> None:
        if tick_s <= 0 or stop_wait_s < 0:
            raise ValueError("tick_s must be > 0 and stop_wait_s >= 0")
        self.name = name
        self.tick_s = tick_s
        self.stop_wait_s = stop_wait_s
        self.first_delay_s = tick_s if first_delay_s is None else first_delay_s
        self._job = job
        self._stop = threading.Event()
        self._tick_lock = threading.Lock()  # ADR-0069 §5: never overlapping itself
        self._state_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.ticks = 0
        self.skipped = 0
        self.errors = 0

    @property
    def running(self) -> bool:
        """True while the timer thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> bool:
        """Start the timer thread once. Idempotent: False if it was already started or the
        lifecycle was stopped (a stopped lifecycle never restarts)."""
        with self._state_lock:
            if self._thread is not None or self._stop.is_set():
                return False
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
            return True

    def request_stop(self) -> None:
        """Ask the timer to stop (a running job sees ``should_stop()`` become True)."""
        self._stop.set()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop the timer and wait for it at most ``stop_wait_s`` (or the smaller
        ``timeout_s``, for a caller sharing one budget). Idempotent.

        Returns True when no timer thread is left running (it ended in time, or never
        started); False when the budget ran out (the daemon thread ends with its job).
        """
        self._stop.set()
        with self._state_lock:
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        budget = self.stop_wait_s if timeout_s is None else min(timeout_s, self.stop_wait_s)
        thread.join(max(0.0, budget))
        return not thread.is_alive()

    def run_once(self) -> T | None:
        """Run one tick now, on this thread. Returns None (and counts ``skipped``) when a
        tick is already running, or when the job raised (counted in ``errors``)."""
        if not self._tick_lock.acquire(blocking=False):
            self.skipped += 1
            return None
        try:
            self.ticks += 1
            return self._job(self._stop.is_set)
        except Exception as exc:
            self.errors += 1
            log.error("%s: tick failed (%s)", self.name, type(exc).__name__)
            return None
        finally:
            self._tick_lock.release()

    def _loop(self) -> None:
        delay = self.first_delay_s
        while not self._stop.wait(delay):
            self.run_once()
            delay = self.tick_s


class CleanupLifecycle(PeriodicLifecycle[PageResult]):
    """The receipt cleanup timer: one scanner page per tick (ADR-0069 §4–§6).

    The cursor is kept between ticks only after a truncated page: the next tick continues
    the pass from the last position seen; after a complete page the next tick starts the
    pass again from the beginning (re-checking rows still kept).
    """

    def __init__(
        self,
        scanner: LocalCompletionReceiptCleanupScanner,
        *,
        tick_s: float,
        stop_wait_s: float,
        name: str = "ql3-receipt-cleanup",
    ) -> None:
        super().__init__(name, self._tick, tick_s=tick_s, stop_wait_s=stop_wait_s)
        self.scanner = scanner
        self.cursor: Position | None = None
        self.last: PageResult | None = None

    def _tick(self, should_stop: Callable[[], bool]) -> PageResult:
        result = self.scanner.run_page(self.cursor, should_stop)
        self.cursor = result.cursor if result.truncated else None
        self.last = result
        if result.failed or any(o not in _QUIET for o in result.counts):
            log.info(
                "receipt cleanup: %d seen, %s, %d failed%s", result.seen,
                ", ".join(f"{n} {o.value}" for o, n in result.counts.items()) or "none done",
                result.failed, " (more follow)" if result.truncated else "",
            )
        return result
