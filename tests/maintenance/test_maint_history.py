"""Run history retention: bounded batches, each task's newest runs kept, the receipt journal
and unretired logs never orphaned, old task-level events pruned."""

from __future__ import annotations

from maint_kit import DAY_MS, Kit

from qinglong.local.recovery.retention import LocalRetention, RetentionConfig
from qinglong.local.storage.retention import uuid7_bound
from qinglong.shared.domain import Trigger
from qinglong.shared.ids import uuid7, uuid7_time_ms
from qinglong.shared.statuses import AttemptStatus


def job(kit: Kit, *, batch: int = 200, keep: int = 20, days: int = 30) -> LocalRetention:
    return LocalRetention(kit.repo, RetentionConfig(
        log_root=str(kit.log_root), log_retention_days=7, history_retention_days=days,
        keep_last_runs=keep, batch=batch,
    ))


def count(kit: Kit, table: str, where: str = "1", args: tuple[object, ...] = ()) -> int:
    return int(kit.db.read(
        lambda c: c.execute(f"SELECT count(*) FROM {table} WHERE {where}", args).fetchone()[0]
    ))


def test_old_runs_are_pruned_with_attempts_and_events_keeping_the_newest(kit: Kit) -> None:
    runs = [kit.attempt(AttemptStatus.SUCCEEDED, register=False).run for _ in range(25)]
    kit.clock.advance(31 * DAY_MS)
    result = job(kit).run_tick()
    assert result.runs_pruned == 5 and result.failed == 0
    left = {r.id for r in kit.repo.list_runs(limit=1000)}
    assert left == {r.id for r in runs[5:]}, "the newest 20 of the task stay"
    pruned = [r.id for r in runs[:5]]
    marks = ",".join("?" * 5)
    assert count(kit, "attempts", f"run_id IN ({marks})", tuple(pruned)) == 0
    assert count(kit, "events", f"run_id IN ({marks})", tuple(pruned)) == 0
    assert count(kit, "events", "run_id IS NOT NULL") > 0


def test_pruning_is_bounded_per_batch(kit: Kit) -> None:
    for _ in range(7):
        kit.attempt(AttemptStatus.FAILED, register=False)
    kit.clock.advance(31 * DAY_MS)
    retention = job(kit, batch=2, keep=1)
    assert [retention.run_tick().runs_pruned for _ in range(4)] == [2, 2, 2, 0]
    assert len(kit.repo.list_runs(limit=1000)) == 1


def test_recent_and_unfinished_runs_are_never_pruned(kit: Kit) -> None:
    old = kit.attempt(AttemptStatus.SUCCEEDED, register=False)
    active = kit.attempt(AttemptStatus.RUNNING, register=False)
    task = kit.default_task()
    queued = kit.repo.create_run(task.id, Trigger.MANUAL)
    assert queued is not None
    kit.clock.advance(31 * DAY_MS)
    recent = kit.attempt(AttemptStatus.SUCCEEDED, register=False)
    newest = kit.attempt(AttemptStatus.SUCCEEDED, register=False)
    assert job(kit, keep=1).run_tick().runs_pruned == 1
    left = {r.id for r in kit.repo.list_runs(limit=1000)}
    assert old.run.id not in left
    assert {active.run.id, queued.id, recent.run.id, newest.run.id} <= left


def test_a_run_with_a_journal_row_is_never_pruned(kit: Kit) -> None:
    registered = kit.attempt(AttemptStatus.SUCCEEDED)  # its row is still pending
    plain = kit.attempt(AttemptStatus.SUCCEEDED, register=False)
    for _ in range(2):
        kit.attempt(AttemptStatus.SUCCEEDED, register=False)
    kit.clock.advance(31 * DAY_MS)
    assert job(kit, keep=1).run_tick().runs_pruned == 2
    left = {r.id for r in kit.repo.list_runs(limit=1000)}
    assert registered.run.id in left and plain.run.id not in left
    assert kit.journal() == {registered.attempt.id: "pending"}


def test_a_run_whose_log_is_not_retired_waits_for_the_retirement(kit: Kit) -> None:
    task = kit.task("long", log_retention_days=60)
    logged = kit.attempt(AttemptStatus.SUCCEEDED, task=task, log=b"x", register=False)
    kit.attempt(AttemptStatus.SUCCEEDED, task=task, register=False)
    kit.clock.advance(31 * DAY_MS)
    assert job(kit, keep=1).run_tick().runs_pruned == 0, "its log file would be orphaned"
    kit.clock.advance(30 * DAY_MS)
    result = job(kit, keep=1).run_tick()  # retires the log, then prunes the run
    assert result.retired == 1 and result.runs_pruned == 1
    assert logged.run.id not in {r.id for r in kit.repo.list_runs(limit=1000)}
    assert count(kit, "local_log_tombstones", "run_id = ?", (logged.run.id,)) == 0, \
        "its tombstone went with it"


def test_keep_last_counts_per_task(kit: Kit) -> None:
    a, b = kit.task("a"), kit.task("b")
    for task in (a, b):
        for _ in range(3):
            kit.attempt(AttemptStatus.SUCCEEDED, task=task, register=False)
    kit.clock.advance(31 * DAY_MS)
    assert job(kit, keep=2).run_tick().runs_pruned == 2
    assert len(kit.repo.list_runs(task_id=a.id)) == 2
    assert len(kit.repo.list_runs(task_id=b.id)) == 2


def test_old_task_level_events_are_pruned_in_bounded_batches(kit: Kit) -> None:
    task = kit.default_task()  # one task_created event at T0
    for i in range(4):
        kit.repo.task_event(task.id, "slot_skipped", {"slot_ms": i})
    kit.clock.advance(31 * DAY_MS)
    kit.repo.task_event(task.id, "slot_skipped", {"slot_ms": 99})
    retention = job(kit, batch=2)
    assert [retention.run_tick().events_pruned for _ in range(4)] == [2, 2, 1, 0]
    assert [e.detail for e in kit.repo.task_events(task.id)] == ['{"slot_ms": 99}']


def test_the_uuid7_bound_orders_with_ids_of_that_millisecond() -> None:
    ident = uuid7()
    ms = uuid7_time_ms(ident)
    assert uuid7_bound(ms) <= ident < uuid7_bound(ms + 1)
