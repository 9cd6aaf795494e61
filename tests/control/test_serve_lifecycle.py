"""PeriodicService: a failing tick never ends the loop; backoff is capped at 5 s."""

from __future__ import annotations

import threading

import pytest

from qinglong.control.serve import lifecycle
from qinglong.control.serve.lifecycle import PeriodicService, Supervisor, wait_until


def test_a_tick_that_raises_keeps_the_loop_alive_and_recovery_clears_the_health() -> None:
    calls: list[int] = []
    broken = threading.Event()
    broken.set()

    def tick() -> int:
        calls.append(1)
        if broken.is_set():
            raise ConnectionError("server closed the connection")
        return 0

    service = PeriodicService("t", tick, period_s=0.01, max_backoff_s=0.05)
    service.start()
    try:
        assert wait_until(lambda: service.health().failures >= 3, 5)
        health = service.health()
        assert not health.healthy and health.last_error == "ConnectionError"
        broken.clear()
        assert wait_until(lambda: service.health().healthy, 5)
        assert service.health().last_error is None
    finally:
        assert service.stop()
    assert len(calls) >= 4


def test_backoff_after_many_failures_is_capped_at_five_seconds_with_jitter() -> None:
    def tick() -> None:
        raise OSError("down")

    service = PeriodicService("t", tick, period_s=1.0)
    for _ in range(1000):
        service.run_once()
    pauses = [service.pause_s() for _ in range(200)]
    assert max(pauses) <= 5.0
    assert min(pauses) >= 2.5
    assert len(set(pauses)) > 100  # jittered, not one value


def test_stop_is_idempotent_and_callable_without_start() -> None:
    service = PeriodicService("t", lambda: None, period_s=1.0)
    assert service.stop() and service.stop()
    sup = Supervisor([service, PeriodicService("u", lambda: None, period_s=1.0)])
    sup.start()
    sup.start()
    assert sup.stop()


def test_a_full_batch_runs_again_at_once_up_to_the_burst() -> None:
    counter = {"n": 0}

    def tick() -> int:
        counter["n"] += 1
        return counter["n"]

    service = PeriodicService("t", tick, period_s=60.0, more=lambda v: v < 5, burst=8)
    service.start()
    try:
        assert wait_until(lambda: counter["n"] >= 5, 5)
    finally:
        service.stop()
    assert counter["n"] == 5  # the 5th tick said "no more": the loop waits its period


def test_the_supervisor_asks_every_service_to_stop_before_waiting_for_any() -> None:
    """A tick in flight in service ``late`` (stopped first: reverse order) ends only once
    ``early`` was asked to stop. Stopping one by one, ``late``'s wait would run out its whole
    budget with ``early`` not yet asked, and ``stop`` would answer False."""
    holder: list[PeriodicService] = []
    in_tick = threading.Event()

    def blocking_tick() -> None:
        in_tick.set()
        early = holder[0]
        early._stop.wait(5)  # released when the supervisor asks ``early`` to stop

    early = PeriodicService("early", lambda: None, period_s=0.05, stop_budget_s=0.5)
    late = PeriodicService("late", blocking_tick, period_s=0.05, stop_budget_s=0.5)
    holder.append(early)
    supervisor = Supervisor([early, late])
    supervisor.start()
    assert in_tick.wait(5)
    assert supervisor.stop() is True
    assert [h.name for h in supervisor.health()] == ["early", "late"]


def test_the_supervisor_waits_against_one_shared_deadline_not_one_budget_each(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two services whose ticks overrun: the first wait spends the whole (largest) budget,
    so the second is given what is left of the same deadline, not a budget of its own."""
    clock = [100.0]
    monkeypatch.setattr(lifecycle.time, "monotonic", lambda: clock[0])

    class Overrunning:
        def __init__(self, name: str) -> None:
            self.name, self.stop_budget_s, self.asked, self.given = name, 10.0, False, None

        def request_stop(self) -> None:
            self.asked = True

        def stop(self, timeout_s: float | None = None) -> bool:
            assert self.asked  # every service was asked before any was waited for
            self.given = timeout_s
            clock[0] += timeout_s or 0.0  # waited it all out: the tick overran
            return False

    first, second = Overrunning("a"), Overrunning("b")
    supervisor = Supervisor([second, first])  # type: ignore[list-item]  # reverse order
    assert supervisor.stop() is False
    assert (first.given, second.given) == (10.0, 0.0)
