"""The scheduler over a real SQLite repository with an injected clock (docs/protocols.md §3.7)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from scheduling_kit import T0, Clocks, make_task, open_repo

from qinglong.local.scheduling.scheduler import IDLE_WAKE_MS, Scheduler
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Trigger


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[LocalRunRepository, Clocks, list[str]]]:
    clock = Clocks()
    db, repo = open_repo(tmp_path, clock)
    stopped: list[str] = []
    yield repo, clock, stopped
    db.close()


_task = make_task


def test_a_slot_fires_once_however_often_the_scheduler_ticks(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "*/2 * * * * *", policy="allow")
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now)  # first sight: the cursor starts now, nothing from the past fires
    assert repo.list_runs(task.id) == []
    clock.now = T0 + 2_000
    for _ in range(5):
        sched.tick(clock.now)
    second = Scheduler(repo, stopped.append)  # a second scheduler on the same store
    second.tick(clock.now)
    runs = repo.list_runs(task.id)
    assert [r.scheduled_at_ms for r in runs] == [T0 + 2_000]


def test_the_unique_slot_constraint_holds_even_if_the_cursor_is_rewound(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "*/2 * * * * *", policy="allow")
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now)
    clock.now = T0 + 2_000
    sched.tick(clock.now)
    repo.db.write(lambda conn: conn.execute(  # rewind the cursor and the stored next fire time
        "UPDATE tasks SET schedule_cursor_ms = ?, next_fire_at_ms = ? WHERE id = ?",
        (T0, T0 + 2_000, task.id)))
    sched.tick(clock.now)
    assert len(repo.list_runs(task.id)) == 1


def test_tick_returns_the_next_slot_as_its_wake_time(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    _task(repo, "*/2 * * * * *")
    sched = Scheduler(repo, stopped.append)
    clock.now = T0 + 500
    assert sched.tick(clock.now) == T0 + 2_000


def test_forbid_skips_a_due_slot_while_a_run_is_active_and_records_it(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "* * * * * *")
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now)
    clock.now = T0 + 1_000
    sched.tick(clock.now)
    [run] = repo.list_runs(task.id)
    repo.claim_attempt(run)
    clock.now = T0 + 2_000
    sched.tick(clock.now)
    assert len(repo.list_runs(task.id)) == 1
    [event] = repo.task_events(task.id, limit=1)
    assert event.kind == "slot_skipped" and "forbid" in (event.detail or "")


def test_allow_queues_a_second_run_beside_an_active_one(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "* * * * * *", policy="allow")
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now)
    clock.now = T0 + 1_000
    sched.tick(clock.now)
    repo.claim_attempt(repo.list_runs(task.id)[0])
    clock.now = T0 + 2_000
    sched.tick(clock.now)
    assert len(repo.list_runs(task.id)) == 2
    assert stopped == []


def test_replace_asks_the_active_run_to_stop_and_queues_the_new_one(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "* * * * * *", policy="replace")
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now)
    clock.now = T0 + 1_000
    sched.tick(clock.now)
    active = repo.list_runs(task.id)[0]
    repo.claim_attempt(active)
    clock.now = T0 + 2_000
    sched.tick(clock.now)
    assert stopped == [active.id]
    assert len(repo.list_runs(task.id)) == 2


def test_after_downtime_the_latest_slot_within_grace_fires_once_and_older_are_skipped(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "* * * * *", misfire_grace_s=60)
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now)
    clock.now = T0 + 10 * 60_000 + 5_000  # ten minutes down
    sched.tick(clock.now)
    runs = repo.list_runs(task.id)
    assert [r.scheduled_at_ms for r in runs] == [T0 + 10 * 60_000]
    [event] = repo.task_events(task.id, limit=1)
    assert event.kind == "slots_skipped" and '"skipped": 9' in (event.detail or "")


def test_a_slot_older_than_the_grace_does_not_fire(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "0 * * * *", misfire_grace_s=60)
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now - 1)
    clock.now = T0 + 5 * 60_000
    sched.tick(clock.now)
    assert repo.list_runs(task.id) == []


def test_boot_tasks_get_one_run_per_serve_start(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "@boot")
    disabled = _task(repo, "@boot", enabled=False)
    sched = Scheduler(repo, stopped.append)
    assert sched.boot(T0) == 1
    assert sched.boot(T0) == 0  # the same start cannot queue it twice
    assert sched.boot(T0 + 1) == 0  # forbid: the first boot run is still unfinished
    repo.request_cancel(repo.list_runs(task.id)[0].id)
    assert sched.boot(T0 + 2) == 1  # the next serve start
    assert [r.trigger for r in repo.list_runs(task.id)] == [Trigger.BOOT, Trigger.BOOT]
    assert repo.list_runs(disabled.id) == []
    assert sched.tick(clock.now) == clock.now + IDLE_WAKE_MS  # @boot never fires on schedule


def test_replace_supersedes_runs_still_queued_so_they_never_pile_up(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, stopped = env
    task = _task(repo, "* * * * * *", policy="replace")
    sched = Scheduler(repo, stopped.append)
    sched.tick(clock.now)
    for step in range(1, 5):  # four slots while the dispatcher starts nothing
        clock.now = T0 + step * 1_000
        sched.tick(clock.now)
    runs = repo.list_runs(task.id)
    assert [r.status.value for r in runs] == ["queued", "cancelled", "cancelled", "cancelled"]
