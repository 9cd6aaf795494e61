"""Steps of the wall clock (issue 10 item 3, case C15, docs/protocols.md §3.7): detected against the
monotonic clock, next fire times rebased, the step recorded, no slot fired twice. Real
SQLite repository with injected wall and monotonic clocks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from scheduling_kit import HOUR, T0, Clocks, make_task, open_repo

from qinglong.local.scheduling.scheduler import Scheduler
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Task, Trigger


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[LocalRunRepository, Clocks, list[str]]]:
    clocks = Clocks()
    db, repo = open_repo(tmp_path, clocks)
    stopped: list[str] = []
    yield repo, clocks, stopped
    db.close()


def _task(repo: LocalRunRepository, schedule: str, policy: str = "allow") -> Task:
    return make_task(repo, schedule, policy)


def _runs_end_at_once(sched: Scheduler, repo: LocalRunRepository) -> Scheduler:
    """Make every run ``sched`` queues end right after its tick (cancelled while queued), as
    if a dispatcher had run it: item 4 bounds an ``allow`` task to one queued run, so slots
    after the first would otherwise be ``backlog_full`` in this dispatcher-less test."""
    tick = sched.tick

    def tick_then_end_runs(now_ms: int) -> int:
        wake = tick(now_ms)
        for run in repo.list_runs(limit=1000):
            if run.status.value == "queued":
                repo.request_cancel(run.id)
        return wake

    sched.tick = tick_then_end_runs  # type: ignore[method-assign]
    return sched


def _slots(repo: LocalRunRepository, task: Task) -> list[int]:
    """The task's scheduled slots in the order their runs were created."""
    return [r.scheduled_at_ms or 0 for r in reversed(repo.list_runs(task.id, limit=1000))]


def _detail(event_detail: str | None) -> dict[str, object]:
    return dict(json.loads(event_detail or "{}"))


def test_the_detector_reports_steps_beyond_the_tolerance_in_both_directions() -> None:
    from qinglong.local.scheduling.clock import WallClockStepDetector

    mono = [0]
    detector = WallClockStepDetector(2_000, lambda: mono[0])
    assert detector.observe(T0) == 0  # the first observation has nothing to compare
    mono[0] += 5_000
    assert detector.observe(T0 + 6_500) == 0  # 1.5 s of drift: within the tolerance
    mono[0] += 2_000
    assert detector.observe(T0 + 8_500 - 2 * HOUR) == -2 * HOUR
    mono[0] += 10_000
    assert detector.observe(T0 + 18_500) == 2 * HOUR
    with pytest.raises(ValueError):
        WallClockStepDetector(-1)


def test_stepped_back_two_hours_an_every_two_seconds_task_fires_at_once_and_again_when_set_right(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    task = _task(repo, "*/2 * * * * *")
    sched = _runs_end_at_once(
        Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono), repo)
    sched.tick(clocks.now)
    for _ in range(5):
        sched.tick(clocks.advance(2_000))
    assert _slots(repo, task) == [T0 + 2_000 * n for n in range(1, 6)]

    clocks.mono += 2_000  # two real seconds pass while the wall clock goes back 2 h
    clocks.now += 2_000 - 2 * HOUR
    back = clocks.now
    for _ in range(5):  # ten seconds in the past
        sched.tick(clocks.now)
        clocks.advance(2_000)
    assert _slots(repo, task)[5:] == [back + 2_000 * n for n in range(1, 5)]  # no 2 h silence

    clocks.mono += 2_000  # set right: the wall clock jumps forward again
    clocks.now = T0 + 24_000
    sched.tick(clocks.now)
    sched.tick(clocks.advance(2_000))
    slots = _slots(repo, task)
    assert slots[-2:] == [T0 + 24_000, T0 + 26_000]  # within one tick of the correction
    assert len(slots) == len(set(slots)) == 11

    steps = [d for _, d in repo.runtime_events("clock_step")]
    assert [(d["direction"], d["step_ms"]) for d in reversed(steps)] == [
        ("backward", -2 * HOUR), ("forward", 2 * HOUR)]
    assert steps[1]["rebased"] == 1
    kinds = [(e.kind, _detail(e.detail).get("reason")) for e in repo.task_events(task.id)]
    assert ("clock_step", "re-evaluated after the wall clock stepped back") in kinds
    assert ("slots_skipped", "clock_step") in kinds  # the fake past's successors, counted


def test_a_small_backward_step_never_refires_cancels_or_reskips_a_slot_already_handled(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    replace = _task(repo, "*/2 * * * * *", policy="replace")
    forbid = _task(repo, "*/2 * * * * *", policy="forbid")
    sched = Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)
    sched.tick(clocks.now)
    sched.tick(clocks.advance(2_000))  # both fire T0+2s
    for task in (replace, forbid):
        repo.claim_attempt(repo.list_runs(task.id)[0])  # ... and are still running
    sched.tick(clocks.advance(2_000))  # T0+4s: replace stops the first, forbid skips
    assert len(stopped) == 1 and _slots(repo, replace) == [T0 + 2_000, T0 + 4_000]
    repo.claim_attempt(next(r for r in repo.list_runs(replace.id) if r.status.value == "queued"))
    events_before = len(repo.task_events(forbid.id))
    stopped.clear()

    clocks.mono += 1_000
    clocks.now = T0 + 1_000  # back 4 s: T0+2s and T0+4s come round again
    for _ in range(2):
        sched.tick(clocks.now)
        clocks.advance(1_000)
        sched.tick(clocks.now)
        clocks.advance(1_000)
    assert clocks.now == T0 + 5_000
    assert stopped == []  # replace did not cancel the active run for a slot that ran
    assert _slots(repo, replace) == [T0 + 2_000, T0 + 4_000]
    assert _slots(repo, forbid) == [T0 + 2_000]
    new_events = repo.task_events(forbid.id)[: len(repo.task_events(forbid.id)) - events_before]
    assert [e.kind for e in new_events if e.kind == "slot_skipped"] == []
    clocks.advance(1_000)
    sched.tick(clocks.now)  # T0+6s: a slot never handled fires (replace) as usual
    assert _slots(repo, replace) == [T0 + 2_000, T0 + 4_000, T0 + 6_000]


def test_a_backward_step_records_one_runtime_event_and_task_events_only_where_it_mattered(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    daily = [_task(repo, "30 3 * * *") for _ in range(40)]  # 03:30Z: not in the stepped span
    frequent = _task(repo, "*/2 * * * * *")
    sched = Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)
    sched.tick(clocks.now)
    sched.tick(clocks.advance(2_000))
    clocks.mono += 2_000
    clocks.now += 2_000 - 2 * HOUR
    sched.tick(clocks.now)
    [(_, step)] = repo.runtime_events("clock_step")
    assert step["rebased"] == 41 and step["direction"] == "backward"
    assert [e.kind for e in repo.task_events(frequent.id, limit=1)] == ["clock_step"]
    assert all(repo.task_events(t.id, limit=1)[0].kind == "task_created" for t in daily)
    assert repo.next_fire_of(daily[0].id) == (T0 + 19 * HOUR + 30 * 60_000, None)


def test_a_forward_step_is_downtime_the_latest_slot_fires_and_the_skip_says_clock_step(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    task = _task(repo, "* * * * *")
    sched = Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)
    sched.tick(clocks.now)
    clocks.mono += 3_000
    clocks.now += 10 * 60_000 + 3_000  # ten minutes ahead in three real seconds
    sched.tick(clocks.now)
    assert _slots(repo, task) == [T0 + 10 * 60_000]
    [skipped] = repo.task_events(task.id, limit=1)
    assert skipped.kind == "slots_skipped"
    # the slots missed are named (T0+1 .. T0+9 minutes), apart from the one that ran
    assert _detail(skipped.detail) == {"skipped": 9, "at_least": False, "reason": "clock_step",
                                       "first_missed_ms": T0 + 60_000,
                                       "last_missed_ms": T0 + 9 * 60_000,
                                       "fired_slot_ms": T0 + 10 * 60_000,
                                       "after_ms": T0, "until_ms": T0 + 10 * 60_000}
    [(_, step)] = repo.runtime_events("clock_step")
    assert step["direction"] == "forward" and step["step_ms"] == 10 * 60_000


def test_a_cursor_left_in_the_future_while_serve_was_down_is_rebased_at_the_first_tick(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    task = _task(repo, "*/2 * * * * *")
    first = _runs_end_at_once(
        Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono), repo)
    first.tick(clocks.now)
    first.tick(clocks.advance(2_000))
    clocks.now -= 2 * HOUR  # serve stopped; the clock was set back; serve starts again
    second = _runs_end_at_once(
        Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono), repo)
    second.tick(clocks.now)
    second.tick(clocks.advance(2_000))
    assert _slots(repo, task) == [T0 + 2_000, T0 - 2 * HOUR + 4_000]
    [(_, step)] = repo.runtime_events("clock_step")
    assert step["detected"] == "cursor_in_future" and step["rebased"] == 1


def test_a_backward_step_whose_rebase_failed_is_rebased_by_the_next_tick(
    env: tuple[LocalRunRepository, Clocks, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from qinglong.shared.errors import StorageBusyError

    repo, clocks, stopped = env
    task = _task(repo, "*/2 * * * * *")
    sched = _runs_end_at_once(
        Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono), repo)
    sched.tick(clocks.now)
    sched.tick(clocks.advance(2_000))
    rebase = repo.rebase_future_cursors

    def busy_once(*args: object, **kw: object) -> int:
        monkeypatch.setattr(repo, "rebase_future_cursors", rebase)
        raise StorageBusyError("the queue is full")

    monkeypatch.setattr(repo, "rebase_future_cursors", busy_once)
    clocks.mono += 2_000
    clocks.now += 2_000 - 2 * HOUR
    with pytest.raises(StorageBusyError):
        sched.tick(clocks.now)  # the step is seen, its rebase fails: the loop retries
    sched.tick(clocks.advance(1_000))
    sched.tick(clocks.advance(1_000))
    assert _slots(repo, task) == [T0 + 2_000, T0 + 6_000 - 2 * HOUR]


def test_a_run_queued_just_before_a_backward_step_stays_startable(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    """Found by the C15 drill on a loaded machine: a run queued just before the clock went
    back two hours waited for its wall time, two hours, and a forbid task's later slots
    coalesced into it meanwhile: the task went silent. A step moves queued runs back by
    the step (a retry's delay keeps its real length)."""
    repo, clocks, stopped = env
    task = _task(repo, "*/2 * * * * *", policy="forbid")
    sched = Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)
    sched.tick(clocks.now)
    sched.tick(clocks.advance(2_000))  # T0+2s: queued, not dispatched yet
    [queued] = repo.queued_runs(task.id)
    retry = repo.create_run(task.id, Trigger.MANUAL)
    assert retry is not None
    repo.db.write(lambda conn: conn.execute(  # as a retry due 300 s from now
        "UPDATE runs SET not_before_ms = ? WHERE id = ?", (clocks.now + 300_000, retry.id)))
    clocks.mono += 1_000
    clocks.now += 1_000 - 2 * HOUR
    sched.tick(clocks.now)
    assert repo.get_run(queued.id).not_before_ms <= clocks.now  # startable at once
    assert repo.get_run(retry.id).not_before_ms == T0 + 2_000 + 300_000 - 2 * HOUR
    [(_, step)] = repo.runtime_events("clock_step")
    assert step["queued_moved"] == 2


def test_a_run_queued_far_ahead_when_serve_starts_after_a_set_back_is_due_now(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    task = _task(repo, "*/2 * * * * *", policy="forbid")
    first = Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)
    first.tick(clocks.now)
    first.tick(clocks.advance(2_000))
    [queued] = repo.queued_runs(task.id)
    clocks.now -= 2 * HOUR  # serve stopped; the clock was set back; serve starts again
    Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono).tick(clocks.now)
    assert repo.get_run(queued.id).not_before_ms == clocks.now


def test_a_retry_queued_on_the_new_clock_before_the_step_is_measured_keeps_its_delay(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    """From review: a monitor thread requeued a retry on the new clock (now + 300 s) between
    the step and the tick that measured it; the rebase moved it back by the whole step, so
    it was due at once. Only runs queued on the old timeline move."""
    repo, clocks, stopped = env
    task = _task(repo, "0 0 1 1 *")
    sched = Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)
    sched.tick(clocks.now)
    clocks.mono += 1_000
    clocks.now += 1_000 - 2 * HOUR  # the step
    retry = repo.create_run(task.id, Trigger.MANUAL)  # requeued after the step
    assert retry is not None
    due = clocks.now + 300_000
    repo.db.write(lambda conn: conn.execute(
        "UPDATE runs SET not_before_ms = ? WHERE id = ?", (due, retry.id)))
    sched.tick(clocks.advance(2_000))  # the step is measured here
    assert repo.get_run(retry.id).not_before_ms == due


def test_a_measured_step_whose_rebase_failed_still_moves_the_queued_runs(
    env: tuple[LocalRunRepository, Clocks, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """From review: the step was consumed by the tick whose rebase failed, and the retried
    rebase treated it as unknown: a run queued just before a 5-minute step waited it out."""
    from qinglong.shared.errors import StorageBusyError

    repo, clocks, stopped = env
    task = _task(repo, "0 0 1 1 *")
    sched = Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)
    sched.tick(clocks.now)
    queued = repo.create_run(task.id, Trigger.MANUAL)
    assert queued is not None
    repo.db.write(lambda conn: conn.execute(
        "UPDATE runs SET not_before_ms = ? WHERE id = ?", (clocks.now + 1_000, queued.id)))
    rebase = repo.rebase_future_cursors

    def busy_once(*args: object, **kw: object) -> int:
        monkeypatch.setattr(repo, "rebase_future_cursors", rebase)
        raise StorageBusyError("the queue is full")

    monkeypatch.setattr(repo, "rebase_future_cursors", busy_once)
    clocks.mono += 500
    clocks.now += 500 - 5 * 60_000  # back five minutes
    with pytest.raises(StorageBusyError):
        sched.tick(clocks.now)
    sched.tick(clocks.advance(1_000))
    assert repo.get_run(queued.id).not_before_ms <= clocks.now + 1_000
