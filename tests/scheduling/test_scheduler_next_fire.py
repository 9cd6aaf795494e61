"""Stored next fire times: a tick costs what is due, not the number of tasks (issue 10 item 1,
case C17, docs/protocols.md §3.7, migration 0004). Real SQLite repository, injected wall and
monotonic clocks."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from scheduling_kit import HOUR, T0, Clocks, make_task, open_repo

from qinglong.local.scheduling import scheduler as scheduling
from qinglong.local.scheduling.scheduler import IDLE_WAKE_MS, Scheduler
from qinglong.local.storage.migrations import default_migrations_dir, open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.cron import Schedule
from qinglong.shared.domain import Task
from qinglong.shared.ids import uuid7


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[LocalRunRepository, Clocks]]:
    clocks = Clocks()
    db, repo = open_repo(tmp_path, clocks)
    yield repo, clocks
    db.close()


_task = make_task


def _scheduler(repo: LocalRunRepository, clocks: Clocks) -> Scheduler:
    return Scheduler(repo, lambda run_id: None, monotonic_ms=lambda: clocks.mono)


def _count_evaluations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    for name in ("due", "next_slot_after", "latest_slot_at_or_before"):
        original = getattr(Schedule, name)

        def counted(self: Schedule, *args: object, _name: str = name,
                    _original: object = original) -> object:
            calls.append(_name)
            return _original(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(Schedule, name, counted)
    return calls


def test_an_idle_tick_evaluates_no_schedule_however_many_tasks_exist(
    env: tuple[LocalRunRepository, Clocks], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, clocks = env
    for n in range(300):  # daily tasks, none due in the next hours
        _task(repo, f"{n % 60} 3 * * *")
    sched = _scheduler(repo, clocks)
    while sched.tick(clocks.now) <= clocks.now:  # the first computation, in batches
        pass
    calls = _count_evaluations(monkeypatch)
    for _ in range(10):
        clocks.advance(1_000)
        sched.tick(clocks.now)
    assert calls == []  # nothing due: no schedule was evaluated, the index answered


def test_each_task_stores_its_next_fire_time_and_only_a_due_task_is_evaluated(
    env: tuple[LocalRunRepository, Clocks], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, clocks = env
    daily = [_task(repo, "0 3 * * *") for _ in range(50)]
    every_two = _task(repo, "*/2 * * * * *", "allow")
    sched = _scheduler(repo, clocks)
    assert sched.tick(clocks.now) == T0 + 2_000  # the earliest stored next fire time
    assert repo.next_fire_of(every_two.id) == (T0 + 2_000, None)
    assert {repo.next_fire_of(t.id) for t in daily} == {(T0 + 19 * HOUR, None)}  # 03:00Z
    calls = _count_evaluations(monkeypatch)
    clocks.advance(2_000)
    assert sched.tick(clocks.now) == T0 + 4_000
    assert [r.scheduled_at_ms for r in repo.list_runs(every_two.id)] == [T0 + 2_000]
    assert repo.next_fire_of(every_two.id) == (T0 + 4_000, None)
    assert calls.count("due") == 1  # the one due task; the 50 daily ones were not read
    assert len(calls) < 10


def test_a_large_import_is_computed_in_bounded_batches_while_the_loop_keeps_ticking(
    env: tuple[LocalRunRepository, Clocks],
) -> None:
    repo, clocks = env
    tasks = [_task(repo, "15 4 * * *") for _ in range(scheduling.PENDING_PAGE * 2 + 10)]
    sched = _scheduler(repo, clocks)
    wakes = [sched.tick(clocks.now) for _ in range(3)]
    assert wakes[:2] == [clocks.now, clocks.now]  # a full batch: go on at once
    assert wakes[2] == clocks.now + IDLE_WAKE_MS  # done: nothing before 04:15 but the cap
    assert repo.pending_schedules(10) == []
    assert {repo.next_fire_of(t.id)[0] for t in tasks} == {T0 + 20 * HOUR + 15 * 60_000}


def test_parsed_schedules_are_cached_by_expression_not_kept_for_every_task(
    env: tuple[LocalRunRepository, Clocks],
) -> None:
    repo, clocks = env
    for n in range(scheduling.SCHEDULE_CACHE + 72):  # all different expressions
        _task(repo, f"{n % 60} {n // 60} * * *")
    sched = _scheduler(repo, clocks)
    while sched.tick(clocks.now) <= clocks.now:
        pass
    assert len(sched._cache) == scheduling.SCHEDULE_CACHE  # a bounded LRU, not one per task


def test_boot_once_and_invalid_schedules_store_no_next_fire_time(
    env: tuple[LocalRunRepository, Clocks],
) -> None:
    repo, clocks = env
    boot, once = _task(repo, "@boot"), _task(repo, "@once")
    broken = _task(repo, "61 * * * *")  # stored before validation existed, say
    sched = _scheduler(repo, clocks)
    assert sched.tick(clocks.now) == clocks.now + IDLE_WAKE_MS
    assert [repo.next_fire_of(t.id) for t in (boot, once, broken)] == [(None, None)] * 3
    assert repo.earliest_next_fire() is None


def test_disable_and_remove_clear_the_next_fire_time_and_enable_recomputes_it_from_now(
    env: tuple[LocalRunRepository, Clocks],
) -> None:
    repo, clocks = env
    task = _task(repo, "* * * * *")
    gone = _task(repo, "* * * * *")
    sched = _scheduler(repo, clocks)
    sched.tick(clocks.now)
    assert repo.next_fire_of(task.id) == (T0 + 60_000, None)
    repo.set_task_enabled(task.name, False)
    repo.remove_task(gone.name)
    assert repo.next_fire_of(task.id) == (None, None)
    assert repo.next_fire_of(gone.id) == (None, None)
    clocks.advance(10 * 60_000 + 30_000)  # ten slots pass while it is disabled
    sched.tick(clocks.now)
    repo.set_task_enabled(task.name, True)
    assert repo.next_fire_of(task.id) == (None, "new")
    sched.tick(clocks.now)
    assert repo.next_fire_of(task.id) == (T0 + 11 * 60_000, None)
    assert repo.list_runs(task.id) == []  # nothing missed while disabled fires
    clocks.advance(30_000)
    sched.tick(clocks.now)
    assert [r.scheduled_at_ms for r in repo.list_runs(task.id)] == [T0 + 11 * 60_000]
    assert repo.list_runs(gone.id) == []


def test_a_database_from_before_migration_0004_keeps_its_cursor_and_catches_up_once(
    tmp_path: Path,
) -> None:
    old = tmp_path / "old-migrations"
    old.mkdir()
    for path in sorted(default_migrations_dir().glob("*.sql"))[:3]:
        shutil.copy(path, old / path.name)
    clocks = Clocks()
    db = open_database(str(tmp_path / "u.db"), old)
    task = Task(id=uuid7(), name="minutely", argv=("true",), schedule="* * * * *",
                schedule_cursor_ms=T0 - 5 * 60_000)  # it last fired five minutes ago
    db.write(lambda c: c.execute(  # as the code of that schema wrote it
        "INSERT INTO tasks (id, name, argv_json, schedule, timezone, schedule_cursor_ms,"
        " created_at_ms, updated_at_ms) VALUES (?, ?, '[\"true\"]', ?, 'UTC', ?, ?, ?)",
        (task.id, task.name, task.schedule, task.schedule_cursor_ms, T0, T0)))
    db.close()
    db = open_database(str(tmp_path / "u.db"))  # the upgrade applies 0004
    try:
        repo = LocalRunRepository(db, clock=clocks)
        assert repo.next_fire_of(task.id) == (None, "new")
        clocks.advance(20_000)
        sched = _scheduler(repo, clocks)
        sched.tick(clocks.now)  # computes the next fire time from the stored cursor ...
        sched.tick(clocks.now)  # ... which is due: the latest slot within the grace fires
        assert [r.scheduled_at_ms for r in repo.list_runs(task.id)] == [T0]
        assert repo.next_fire_of(task.id) == (T0 + 60_000, None)
        [skipped] = repo.task_events(task.id, limit=1)
        assert skipped.kind == "slots_skipped" and '"skipped": 4' in (skipped.detail or "")
    finally:
        db.close()

