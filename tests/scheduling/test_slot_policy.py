"""The slot policy at the concurrency cap (issue 10 item 4, case C16) over a real SQLite
repository with an injected clock: forbid coalescing, allow's bounded backlog, the stable
reason codes of the occurrence ledger (docs/protocols.md §4.2) and bounded skip events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from scheduling_kit import T0, Clocks, make_task, open_repo

from qinglong.local.app.service import LocalService
from qinglong.local.scheduling.scheduler import Scheduler
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Event, Task, Trigger
from qinglong.shared.errors import ConflictError
from qinglong.shared.statuses import RunStatus


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[LocalRunRepository, Clocks, Scheduler]]:
    clock = Clocks()
    db, repo = open_repo(tmp_path, clock)
    yield repo, clock, Scheduler(repo, lambda run_id: None)
    db.close()


_task = make_task


def _slots(sched: Scheduler, clock: Clocks, first: int, last: int) -> None:
    """Tick at each whole second ``first..last`` after T0 (every slot of ``* * * * * *``)."""
    for step in range(first, last + 1):
        clock.now = T0 + step * 1_000
        sched.tick(clock.now)


def _outcomes(repo: LocalRunRepository, task: Task) -> list[tuple[str, dict[str, object]]]:
    """Slot events of the task, oldest first, as (kind, detail)."""
    events: list[Event] = repo.task_events(task.id, limit=1000)
    return [(e.kind, json.loads(e.detail or "{}")) for e in reversed(events)
            if e.kind in ("slot_skipped", "slot_coalesced")]


def test_forbid_slots_coalesce_into_the_queued_run_instead_of_being_skipped(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, sched = env
    task = _task(repo, "* * * * * *", "forbid")
    sched.tick(clock.now)
    _slots(sched, clock, 1, 4)  # the first slot queues a run; nothing starts it (cap reached)
    [queued] = repo.list_runs(task.id)
    assert queued.status.value == "queued" and queued.scheduled_at_ms == T0 + 1_000
    [(kind, detail)] = _outcomes(repo, task)
    assert kind == "slot_coalesced"
    assert detail["reason"] == "coalesced" and detail["run_id"] == queued.id
    assert (detail["slot_ms"], detail["last_slot_ms"], detail["count"]) == (
        T0 + 2_000, T0 + 4_000, 3)


def test_forbid_skips_a_slot_while_its_run_is_active_with_reason_skipped_active(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, sched = env
    task = _task(repo, "* * * * * *", "forbid")
    sched.tick(clock.now)
    _slots(sched, clock, 1, 1)
    repo.claim_attempt(repo.list_runs(task.id)[0])  # dispatching: the run has started
    _slots(sched, clock, 2, 3)
    assert len(repo.list_runs(task.id)) == 1
    [(kind, detail)] = _outcomes(repo, task)
    assert kind == "slot_skipped"
    assert detail["reason"] == "skipped_active" and detail["policy"] == "forbid"
    assert detail["count"] == 2


def test_allow_keeps_one_queued_run_beyond_the_active_ones_and_records_backlog_full(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, sched = env
    task = _task(repo, "* * * * * *", "allow")
    sched.tick(clock.now)
    _slots(sched, clock, 1, 1)
    repo.claim_attempt(repo.list_runs(task.id)[0])  # one active run
    _slots(sched, clock, 2, 10)
    runs = repo.list_runs(task.id, limit=100)
    assert sorted(r.status.value for r in runs) == ["dispatching", "queued"]
    [(kind, detail)] = _outcomes(repo, task)
    assert (kind, detail["reason"], detail["count"]) == ("slot_skipped", "backlog_full", 8)
    assert (detail["slot_ms"], detail["last_slot_ms"]) == (T0 + 3_000, T0 + 10_000)


def test_a_run_created_between_skips_starts_a_new_skip_event(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, sched = env
    task = _task(repo, "* * * * * *", "allow")
    sched.tick(clock.now)
    _slots(sched, clock, 1, 3)  # slot 1 queued, 2-3 backlog_full
    repo.claim_attempt(repo.list_runs(task.id)[-1])  # the queued run starts
    _slots(sched, clock, 4, 6)  # slot 4 queued, 5-6 backlog_full
    counts = [(d["reason"], d["count"]) for _, d in _outcomes(repo, task)]
    assert counts == [("backlog_full", 2), ("backlog_full", 2)]


def test_an_every_second_task_skipped_for_ten_minutes_writes_one_event(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, sched = env
    task = _task(repo, "* * * * * *", "forbid")
    sched.tick(clock.now)
    _slots(sched, clock, 1, 1)
    repo.claim_attempt(repo.list_runs(task.id)[0])
    _slots(sched, clock, 2, 601)
    outcomes = _outcomes(repo, task)
    assert len(outcomes) == 1
    assert outcomes[0][1]["count"] == 600
    assert outcomes[0][1]["last_slot_ms"] == T0 + 601_000


def test_a_boot_slot_of_an_allow_task_with_a_queued_run_is_backlog_full(env) -> None:  # type: ignore[no-untyped-def]
    repo, _clock, sched = env
    task = _task(repo, "@boot", "allow")
    assert sched.boot(T0) == 1
    assert sched.boot(T0 + 1) == 0  # the first boot run has not started
    assert len(repo.list_runs(task.id)) == 1
    [(kind, detail)] = _outcomes(repo, task)
    assert (kind, detail["reason"], detail["slot_ms"]) == ("slot_skipped", "backlog_full", T0 + 1)


def test_a_manual_run_of_a_forbid_task_joins_its_queued_run_instead_of_conflicting(env) -> None:  # type: ignore[no-untyped-def]
    repo, clock, sched = env
    task = _task(repo, "* * * * * *", "forbid")
    sched.tick(clock.now)
    _slots(sched, clock, 1, 1)
    [queued] = repo.list_runs(task.id)
    service = LocalService(repo, supervised=False)
    assert service.run_now(task.name)["id"] == queued.id
    assert len(repo.list_runs(task.id)) == 1


def test_a_manual_run_of_a_forbid_task_conflicts_while_its_run_is_active(env) -> None:  # type: ignore[no-untyped-def]
    repo, _clock, _sched = env
    task = _task(repo, "@once", "forbid")
    service = LocalService(repo, supervised=False)
    first = service.run_now(task.name)
    repo.claim_attempt(repo.get_run(first["id"]))
    with pytest.raises(ConflictError):
        service.run_now(task.name)
    assert len(repo.list_runs(task.id)) == 1


def test_manual_runs_of_an_allow_task_are_not_bounded_by_the_backlog(env) -> None:  # type: ignore[no-untyped-def]
    repo, _clock, _sched = env
    task = _task(repo, "@once", "allow")
    service = LocalService(repo, supervised=False)
    ids = {service.run_now(task.name)["id"] for _ in range(3)}
    assert len(ids) == 3
    assert all(r.status.value == "queued" for r in repo.list_runs(task.id))


def test_disabling_a_task_cancels_its_queued_runs_and_leaves_a_started_one_alone(
    env,  # type: ignore[no-untyped-def]
) -> None:
    """From a fresh user's trial: a run queued at the cap, then the task disabled, still
    started (at the next serve, minutes later). Disable means nothing more starts."""
    repo, _clock, _sched = env
    task = _task(repo, "* * * * * *", "allow")
    started = repo.create_run(task.id, Trigger.MANUAL)
    queued = repo.create_run(task.id, Trigger.MANUAL)
    assert started is not None and queued is not None
    repo.claim_attempt(started)
    repo.set_task_enabled(task.name, False)
    assert repo.get_run(queued.id).status is RunStatus.CANCELLED
    assert repo.get_run(started.id).status is RunStatus.DISPATCHING
    [event] = [e for e in repo.list_events(queued.id) if e.kind == "run_cancelled"]
    assert json.loads(event.detail or "{}") == {"reason": "task_disabled"}


def test_a_tick_that_read_the_task_as_due_before_disable_queues_no_run(
    env,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From review: disable committed between the tick's due page and the admission, and
    the admission still queued a run, which the dispatcher would start."""
    repo, clock, sched = env
    task = _task(repo, "* * * * * *", "forbid")
    sched.tick(clock.now)
    due_schedules = repo.due_schedules

    def due_then_disable(now_ms: int, limit: int) -> object:
        entries = due_schedules(now_ms, limit)
        repo.set_task_enabled(task.name, False)  # `ql3 local task disable` meanwhile
        return entries

    monkeypatch.setattr(repo, "due_schedules", due_then_disable)
    clock.now += 1_000
    sched.tick(clock.now)
    assert repo.queued_runs(task.id) == []
