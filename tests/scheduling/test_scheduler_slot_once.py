"""A slot is handled once, whatever stops a tick or moves the clock (issue 10 items 3 and 4,
docs/protocols.md §3.7). Found by review of the merged change: a tick that stopped between the run's
commit and the cursor's handled its slot again (``replace`` cancelled the run of that very
slot, ``forbid`` recorded a skip for a slot that ran); a slot re-evaluated after a backward
step stretched a merged outcome backwards; slots skipped by a forward step ran once the
clock was set right."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from scheduling_kit import T0, Clocks, make_task, open_repo

from qinglong.local.scheduling.scheduler import Scheduler
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import StorageBusyError
from qinglong.shared.statuses import AttemptStatus

MIN = 60_000


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[LocalRunRepository, Clocks, list[str]]]:
    clocks = Clocks()
    db, repo = open_repo(tmp_path, clocks)
    yield repo, clocks, []
    db.close()


def _scheduler(repo: LocalRunRepository, clocks: Clocks, stopped: list[str]) -> Scheduler:
    return Scheduler(repo, stopped.append, monotonic_ms=lambda: clocks.mono)


def _slots(repo: LocalRunRepository, task_id: str) -> list[int]:
    """Minutes after T0 of the task's runs' slots, in creation order."""
    return [((r.scheduled_at_ms or 0) - T0) // MIN
            for r in reversed(repo.list_runs(task_id, limit=1000))]


def _end_queued(repo: LocalRunRepository, task_id: str) -> None:
    for run in repo.queued_runs(task_id):  # as if dispatched and finished at once
        repo.request_cancel(run.id)


@pytest.mark.parametrize("policy", ["replace", "forbid"])
def test_a_slot_handled_again_after_a_stopped_tick_keeps_its_run_and_records_nothing(
    env: tuple[LocalRunRepository, Clocks, list[str]], monkeypatch: pytest.MonkeyPatch,
    policy: str,
) -> None:
    repo, clocks, stopped = env
    task = make_task(repo, "* * * * *", policy)
    _scheduler(repo, clocks, stopped).tick(clocks.now)
    advance = repo.advance_schedule

    def stop_once(*args: object, **kw: object) -> bool:
        monkeypatch.setattr(repo, "advance_schedule", advance)
        raise StorageBusyError("the queue is full")  # or: the process died here

    monkeypatch.setattr(repo, "advance_schedule", stop_once)
    with pytest.raises(StorageBusyError):
        _scheduler(repo, clocks, stopped).tick(clocks.advance(MIN))
    [run] = repo.list_runs(task.id)  # the run of T0+1m is committed, the cursor is not
    repo.claim_attempt(run)  # and the dispatcher started it meanwhile
    _scheduler(repo, clocks, stopped).tick(clocks.advance(1_000))  # a restarted serve
    assert stopped == [] and not repo.get_run(run.id).cancel_requested
    assert [e.kind for e in repo.task_events(task.id) if e.kind.startswith("slot")] == []
    assert _slots(repo, task.id) == [1]


def test_a_slot_replayed_after_a_backward_step_never_stretches_a_merged_outcome(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    task = make_task(repo, "* * * * *", "forbid")
    sched = _scheduler(repo, clocks, stopped)
    sched.tick(clocks.now)
    sched.tick(clocks.advance(MIN))  # T0+1m: a run, which runs for a long time
    [run] = repo.list_runs(task.id)
    attempt = repo.claim_attempt(run)
    for _ in range(9):  # T0+2m .. T0+10m: skipped_active, merged into one event
        sched.tick(clocks.advance(MIN))
    clocks.mono += 1_000
    clocks.now = T0 - 20 * MIN  # the wall clock steps back 30 minutes
    sched.tick(clocks.now)
    for _ in range(15):  # T0-19m .. T0-5m: slots from before the task existed
        sched.tick(clocks.advance(MIN))
    repo.finish_attempt(attempt, AttemptStatus.LOST)  # the long run ends
    for _ in range(16):  # T0-4m .. T0+11m: the replay reaches the handled slots
        sched.tick(clocks.advance(MIN))
        _end_queued(repo, task.id)
    assert [m for m in _slots(repo, task.id) if 0 < m <= 10] == [1]  # 2..10 were skipped
    for event in repo.task_events(task.id, limit=1000):
        if event.kind == "slot_skipped":
            detail = json.loads(event.detail or "{}")
            assert detail["slot_ms"] <= detail["last_slot_ms"], detail


def test_slots_skipped_by_a_forward_step_do_not_run_once_the_clock_is_set_right(
    env: tuple[LocalRunRepository, Clocks, list[str]],
) -> None:
    repo, clocks, stopped = env
    task = make_task(repo, "* * * * *", "allow")
    sched = _scheduler(repo, clocks, stopped)
    sched.tick(clocks.now)
    clocks.mono += 1_000
    clocks.now += 10 * MIN + 1_000  # a bad NTP answer: ten minutes ahead
    sched.tick(clocks.now)  # T0+10m fires, nine slots are recorded skipped
    _end_queued(repo, task.id)
    clocks.mono += 1_000
    clocks.now = T0 + 2_000  # set right again
    sched.tick(clocks.now)
    for _ in range(11):
        sched.tick(clocks.advance(MIN))
        _end_queued(repo, task.id)
    assert _slots(repo, task.id) == [10, 11]
