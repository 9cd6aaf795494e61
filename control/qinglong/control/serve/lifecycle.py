"""One bounded, self-healing loop per control lifecycle (docs/protocols.md §4.5; dagster's daemons).

``PeriodicService`` calls a ``tick`` (one bounded batch: a scheduler tick, a lease recovery
batch, an enrollment sweep…) every ``period_s`` seconds in its own thread. A tick that raises
(the database restarting, a failover in progress) never ends the loop: the error's type is
kept (``last_error``), the service reports itself unhealthy, and the next tick waits a
jittered backoff doubling from ``period_s`` and capped at ``max_backoff_s`` (5 s by the
issue's rule) — never a crash loop. ``stop`` is idempotent, callable without ``start``, and
waits at most ``stop_budget_s`` for a tick in flight.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_BACKOFF_S_DEFAULT = 5.0
STOP_BUDGET_S_DEFAULT = 10.0

_log = logging.getLogger("qinglong.control.serve")


@dataclass(frozen=True)
class ServiceHealth:
    """A lifecycle's state for ``/readyz`` and logs: ``healthy`` is False after a failed tick
    until the next one succeeds; ``failures`` counts consecutive failures; ``last_error`` is
    the exception's type name (never its text: it may hold SQL or a URL)."""

    name: str
    healthy: bool
    failures: int
    last_error: str | None
    ticks: int


class PeriodicService:
    """Runs ``tick()`` every ``period_s`` seconds (> 0) until stopped; a tick returning a
    truthy "more" value (e.g. a full page) runs again at once, up to ``burst`` times."""

    def __init__(self, name: str, tick: Callable[[], Any], *, period_s: float,
                 max_backoff_s: float = MAX_BACKOFF_S_DEFAULT,
                 stop_budget_s: float = STOP_BUDGET_S_DEFAULT,
                 more: Callable[[Any], bool] | None = None, burst: int = 8) -> None:
        if period_s <= 0 or max_backoff_s <= 0:
            raise ValueError("period_s and max_backoff_s must be > 0")
        self.name = name
        self._tick = tick
        self._period_s = period_s
        self._max_backoff_s = max_backoff_s
        self._stop_budget_s = stop_budget_s
        self._more = more
        self._burst = burst
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._failures = 0
        self._ticks = 0
        self._last_error: str | None = None
        self.ticked = threading.Event()  # test signal: set after every tick, ok or not

    def health(self) -> ServiceHealth:
        with self._lock:
            return ServiceHealth(self.name, self._failures == 0, self._failures,
                                 self._last_error, self._ticks)

    def run_once(self) -> Any:
        """One tick with the loop's error accounting; returns the tick's value or None when
        it raised (the error is logged by type and kept)."""
        try:
            value = self._tick()
        except Exception as exc:  # the loop survives any tick failure (docs/protocols.md §4.5)
            with self._lock:
                self._failures += 1
                self._last_error = type(exc).__name__
                failures = self._failures
            level = logging.WARNING if failures in (1, 10) or failures % 100 == 0 else \
                logging.DEBUG
            _log.log(level, "%s: tick failed (%s), failure %d; retrying with backoff",
                     self.name, type(exc).__name__, failures)
            value = None
        else:
            with self._lock:
                if self._failures:
                    _log.info("%s: recovered after %d failed ticks", self.name,
                              self._failures)
                self._failures = 0
                self._last_error = None
        finally:
            with self._lock:
                self._ticks += 1
            self.ticked.set()
        return value

    def pause_s(self) -> float:
        """Seconds until the next tick: the period, or after failures a jittered doubling
        backoff from the period, capped at ``max_backoff_s``."""
        with self._lock:
            failures = self._failures
        if failures == 0:
            return self._period_s
        base = min(self._max_backoff_s, self._period_s * (2 ** min(failures, 16)))
        return float(min(self._max_backoff_s, base * random.uniform(0.5, 1.0)))  # noqa: S311

    def start(self) -> None:
        """Start the loop thread (daemon); a second call does nothing."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name=f"ql3-{self.name}",
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for _ in range(self._burst):
                value = self.run_once()
                if self._stop.is_set() or value is None or self._more is None \
                        or not self._more(value):
                    break
            self._stop.wait(self.pause_s())

    def request_stop(self) -> None:
        """Ask the loop to end without waiting (``Supervisor.stop`` asks every service
        first, so their ticks in flight end together). Idempotent."""
        self._stop.set()

    @property
    def stop_budget_s(self) -> float:
        """Seconds ``stop`` waits at most for a tick in flight."""
        return self._stop_budget_s

    def stop(self, timeout_s: float | None = None) -> bool:
        """Ask the loop to end and wait for a tick in flight, up to the stop budget (or
        ``timeout_s`` seconds when given and shorter); True when the thread ended (or never
        started). Idempotent."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return True
        wait = self._stop_budget_s if timeout_s is None else min(self._stop_budget_s,
                                                                 max(0.0, timeout_s))
        thread.join(wait)
        return not thread.is_alive()


class Supervisor:
    """Starts services together and stops them together, in reverse order (river)."""

    def __init__(self, services: list[PeriodicService]) -> None:
        self.services = services

    def start(self) -> None:
        for service in self.services:
            service.start()

    def stop(self) -> bool:
        """Stop every service (reverse order); True when all ended within their budgets.
        Every service is asked first and then waited for against one shared deadline (the
        largest stop budget), so a replica's stop takes its longest tick in flight, never
        the sum of their budgets (the pod's termination grace, helm/qinglong, counts on
        it)."""
        for service in reversed(self.services):
            service.request_stop()
        deadline = time.monotonic() + max((s.stop_budget_s for s in self.services),
                                          default=0.0)
        deadline_ok = True
        for service in reversed(self.services):  # one shared deadline, not one each
            deadline_ok = service.stop(deadline - time.monotonic()) and deadline_ok
        return deadline_ok

    def health(self) -> list[ServiceHealth]:
        return [s.health() for s in self.services]


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.05) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` seconds pass (monotonic)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()
