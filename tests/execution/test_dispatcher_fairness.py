"""Round-robin dispatch at the concurrency cap (issue 10 item 4, case C16): a real SQLite
repository and a fake coordinator that records the order of starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qinglong.local.execution.dispatcher import Dispatcher
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import ConcurrencyPolicy, Run, Task, Trigger
from qinglong.shared.ids import uuid7

T0 = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


class FakeCoordinator:
    """Claims the attempt (the run becomes ``dispatching``) and keeps it live until
    :meth:`finish`; ``started`` lists the run ids in start order."""

    def __init__(self, repo: LocalRunRepository) -> None:
        self.repo = repo
        self.live: set[str] = set()
        self.started: list[str] = []

    def active_count(self) -> int:
        return len(self.live)

    def start(self, run: Run, task: Task) -> Run:
        self.repo.claim_attempt(run)
        self.live.add(run.id)
        self.started.append(run.id)
        return self.repo.get_run(run.id)

    def finish(self, run_id: str) -> None:
        self.live.discard(run_id)


class Env:
    def __init__(self, tmp: Path) -> None:
        self.clock = Clock()
        self.db = open_database(str(tmp / "d.db"))
        self.repo = LocalRunRepository(self.db, clock=self.clock)
        self.coordinator = FakeCoordinator(self.repo)

    def dispatcher(self, cap: int) -> Dispatcher:
        return Dispatcher(self.repo, self.coordinator, cap)  # type: ignore[arg-type]

    def task(self, policy: str) -> Task:
        return self.repo.create_task(Task(id=uuid7(), name=f"t{uuid7()[-8:]}", argv=("true",),
                                          schedule="@once",
                                          concurrency=ConcurrencyPolicy(policy)))

    def queue(self, task: Task) -> Run:
        self.clock.now += 10  # each run due a little after the previous one
        run = self.repo.create_run(task.id, Trigger.MANUAL)
        assert run is not None
        return run


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path)
    yield e
    e.db.close()


def test_at_the_cap_a_task_behind_an_older_backlog_starts_at_the_next_free_slot(env: Env) -> None:
    a, b = env.task("allow"), env.task("forbid")
    a1, a2 = env.queue(a), env.queue(a)
    dispatcher = env.dispatcher(cap=2)
    assert dispatcher.dispatch(env.clock.now) == 2  # a1 and a2 take both slots
    a3 = env.queue(a)  # older than b1
    b1 = env.queue(b)
    assert dispatcher.dispatch(env.clock.now) == 0  # at the cap
    env.coordinator.finish(a1.id)
    assert dispatcher.dispatch(env.clock.now) == 1
    assert env.coordinator.started == [a1.id, a2.id, b1.id]
    env.coordinator.finish(a2.id)
    assert dispatcher.dispatch(env.clock.now) == 1
    assert env.coordinator.started[-1] == a3.id


def test_allow_tasks_take_turns_when_more_runs_are_due_than_slots(env: Env) -> None:
    a, b = env.task("allow"), env.task("allow")
    a_runs = [env.queue(a) for _ in range(3)]
    b_runs = [env.queue(b) for _ in range(2)]
    assert env.dispatcher(cap=4).dispatch(env.clock.now) == 4
    assert env.coordinator.started == [a_runs[0].id, b_runs[0].id, a_runs[1].id, b_runs[1].id]


def test_forbid_tasks_with_an_active_run_do_not_hide_a_startable_run_behind_them(
    env: Env,
) -> None:
    dispatcher = env.dispatcher(cap=25)
    blocked = [env.task("forbid") for _ in range(20)]
    for task in blocked:
        env.queue(task)
    assert dispatcher.dispatch(env.clock.now) == 20  # each blocked task has one active run
    for task in blocked:  # and a queued one (a retry or a manual run) behind it
        env.repo.create_run(task.id, Trigger.MANUAL)
    env.clock.now += 10
    late = env.queue(env.task("forbid"))
    assert dispatcher.dispatch(env.clock.now) == 1
    assert env.coordinator.started[-1] == late.id


def test_a_foreground_run_dispatches_only_its_own_run(env: Env) -> None:
    other, mine = env.queue(env.task("forbid")), env.queue(env.task("forbid"))
    assert env.dispatcher(cap=2).dispatch(env.clock.now, only_run_id=mine.id) == 1
    assert env.coordinator.started == [mine.id]
    assert env.repo.get_run(other.id).status.value == "queued"


def test_a_task_with_a_long_manual_backlog_does_not_hide_another_tasks_due_run(env: Env) -> None:
    """From review: the candidate page held only the 256 oldest due runs, so 300 manual
    runs of one task kept another task's run out of the round-robin until they drained."""
    from qinglong.shared.statuses import AttemptStatus

    busy, other = env.task("allow"), env.task("allow")
    for _ in range(300):
        env.queue(busy)
    late = env.queue(other)
    dispatcher = env.dispatcher(cap=2)
    env.clock.now += 1_000
    while late.id not in env.coordinator.started and len(env.coordinator.started) < 400:
        dispatcher.dispatch(env.clock.now)
        for run_id in list(env.coordinator.live):  # each start ends before the next dispatch
            env.coordinator.finish(run_id)
            env.repo.finish_attempt(env.repo.get_run(run_id).attempts[-1], AttemptStatus.FAILED)
    # the other task never started, so it takes the first or second turn
    assert env.coordinator.started.index(late.id) < 2
