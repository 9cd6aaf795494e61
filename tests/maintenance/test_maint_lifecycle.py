"""One timer, never overlapping itself, idempotent start/stop, stop within its budget
(ADR-0069 §5), and the cleanup cursor between ticks (ADR-0069 §4)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from maint_kit import Kit

from qinglong.local.recovery.cleanup_scanner import (
    LocalCompletionReceiptCleanupScanner,
    ScannerConfig,
)
from qinglong.local.recovery.lifecycle import CleanupLifecycle, PeriodicLifecycle
from qinglong.shared.statuses import AttemptStatus


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def lifecycle_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_start_is_idempotent_and_ticks_repeat_on_one_thread() -> None:
    calls: list[str] = []
    timer = PeriodicLifecycle(
        "maint-test-a", lambda stop: calls.append(threading.current_thread().name),
        tick_s=0.01, stop_wait_s=2,
    )
    assert not timer.running
    assert timer.start() is True
    assert timer.start() is False
    assert len(lifecycle_threads("maint-test-a")) == 1
    assert wait_until(lambda: len(calls) >= 3)
    assert timer.stop() is True
    assert set(calls) == {"maint-test-a"}
    assert timer.stop() is True, "stop is idempotent"
    assert timer.start() is False, "a stopped lifecycle never restarts"
    assert lifecycle_threads("maint-test-a") == []


def test_creating_a_lifecycle_starts_nothing_and_stop_without_start_is_fine() -> None:
    before = threading.active_count()
    timer = PeriodicLifecycle("maint-test-b", lambda stop: None, tick_s=1, stop_wait_s=1)
    assert threading.active_count() == before
    assert timer.stop() is True


def test_ticks_never_overlap() -> None:
    inside = threading.Event()
    release = threading.Event()
    active = [0]
    peak = [0]

    def job(should_stop: Callable[[], bool]) -> int:
        active[0] += 1
        peak[0] = max(peak[0], active[0])
        inside.set()
        release.wait(5)
        active[0] -= 1
        return 1

    timer = PeriodicLifecycle("maint-test-c", job, tick_s=0.01, stop_wait_s=2)
    timer.start()
    assert inside.wait(5)
    assert timer.run_once() is None, "a tick already runs: this one is skipped"
    assert timer.skipped >= 1
    release.set()
    assert timer.stop() is True
    assert peak[0] == 1


def test_stop_waits_at_most_its_budget_for_a_stuck_job() -> None:
    inside = threading.Event()
    release = threading.Event()

    def stuck(should_stop: Callable[[], bool]) -> None:
        inside.set()
        release.wait(10)  # ignores should_stop

    timer = PeriodicLifecycle("maint-test-d", stuck, tick_s=0.01, stop_wait_s=2)
    timer.start()
    assert inside.wait(5)
    started = time.monotonic()
    assert timer.stop(timeout_s=0.05) is False, "a shared, smaller budget wins"
    assert time.monotonic() - started < 1.0, "returned before its own 2 s budget"
    started = time.monotonic()
    assert timer.stop() is False, "the budget ran out"
    # waited its whole budget, and not for the job (which holds on for 10 s)
    assert 2 <= time.monotonic() - started < 8
    release.set()
    assert wait_until(lambda: not timer.running)


def test_a_job_that_checks_should_stop_ends_promptly() -> None:
    inside = threading.Event()

    def polite(should_stop: Callable[[], bool]) -> None:
        inside.set()
        while not should_stop():
            time.sleep(0.005)

    timer = PeriodicLifecycle("maint-test-e", polite, tick_s=0.01, stop_wait_s=5)
    timer.start()
    assert inside.wait(5)
    assert timer.stop() is True  # the job saw should_stop and ended within the budget


def test_a_failing_tick_is_counted_and_the_timer_lives_on() -> None:
    calls = [0]

    def boom(should_stop: Callable[[], bool]) -> None:
        calls[0] += 1
        raise RuntimeError("tick failed")

    timer = PeriodicLifecycle("maint-test-f", boom, tick_s=0.01, stop_wait_s=2)
    timer.start()
    assert wait_until(lambda: calls[0] >= 3)
    assert timer.stop() is True
    assert timer.errors >= 3


def cleanup(kit: Kit, page: int) -> CleanupLifecycle:
    scanner = LocalCompletionReceiptCleanupScanner(
        kit.repo, kit.receipts, ScannerConfig(page_size=page, missing_receipt_retention_s=0)
    )
    return CleanupLifecycle(scanner, tick_s=300, stop_wait_s=2)


def test_a_truncated_page_continues_next_tick_and_a_full_pass_restarts(kit: Kit) -> None:
    running = []
    for _ in range(3):
        running.append(kit.attempt(AttemptStatus.RUNNING))
        kit.clock.advance(1)
    life = cleanup(kit, page=2)
    first = life.run_once()
    assert first is not None and first.truncated and first.seen == 2
    assert life.cursor == (running[1].attempt.created_at_ms, running[1].attempt.id)
    second = life.run_once()
    assert second is not None and not second.truncated and second.seen == 1
    assert life.cursor is None, "a complete pass: the next tick starts from the beginning"
    third = life.run_once()
    assert third is not None and third.seen == 2, "kept rows are checked again"


def test_one_page_per_tick_however_many_rows_are_due(kit: Kit) -> None:
    for _ in range(5):
        kit.write_receipt(kit.attempt(AttemptStatus.SUCCEEDED))
    life = cleanup(kit, page=2)
    result = life.run_once()
    assert result is not None and result.seen == 2 and result.truncated
    assert len(kit.journal()) == 3


def test_a_stop_request_ends_a_page_between_items(kit: Kit) -> None:
    for _ in range(4):
        kit.attempt(AttemptStatus.RUNNING)
    scanner = LocalCompletionReceiptCleanupScanner(
        kit.repo, kit.receipts, ScannerConfig(page_size=8, missing_receipt_retention_s=0)
    )
    asked = [0]

    def stop_after_two() -> bool:
        asked[0] += 1
        return asked[0] > 2

    result = scanner.run_page(None, stop_after_two)
    assert result.seen == 2 and result.interrupted and result.truncated


def test_the_cleanup_timer_settles_receipts_by_itself(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED)
    kit.write_receipt(made)
    scanner = LocalCompletionReceiptCleanupScanner(
        kit.repo, kit.receipts, ScannerConfig(page_size=8, missing_receipt_retention_s=0)
    )
    life = CleanupLifecycle(scanner, tick_s=0.01, stop_wait_s=2, name="maint-test-g")
    life.start()
    assert wait_until(lambda: kit.journal() == {})
    assert life.stop() is True
    assert life.ticks >= 1
