"""The socket op ``task_occurrences`` (docs/protocols.md §3.8, the panel's Occurrences page)
over a real SQLite repository with an injected clock: every slot outcome the scheduler
records reads back newest first in the cluster ledger's shape, keyset paged; a manual run is
no slot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scheduling_kit import HOUR, T0, Clocks, make_task, open_repo

from qinglong.local.app import ops
from qinglong.local.app.service import LocalService
from qinglong.local.scheduling.scheduler import Scheduler
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import NotFoundError, ValidationError


@pytest.fixture
def env(tmp_path: Path) -> Iterator[tuple[LocalRunRepository, Clocks, Scheduler]]:
    clock = Clocks()
    db, repo = open_repo(tmp_path, clock)
    yield repo, clock, Scheduler(repo, lambda run_id: None,
                                  monotonic_ms=lambda: clock.mono)
    db.close()


def _slots(sched: Scheduler, clock: Clocks, first: int, last: int) -> None:
    for step in range(first, last + 1):
        clock.now = T0 + step * 1_000
        sched.tick(clock.now)


def _iso(ms: int) -> str:
    from qinglong.local.app.views import iso

    text = iso(ms)
    assert text is not None
    return text


def _page(service: LocalService, name: str, **args: Any) -> dict[str, Any]:
    answer: dict[str, Any] = ops.call(service, "task_occurrences", {"name": name, **args})
    return answer


def test_every_slot_outcome_reads_back_newest_first_and_a_manual_run_is_no_slot(
        env: tuple[LocalRunRepository, Clocks, Scheduler]) -> None:
    repo, clock, sched = env
    task = make_task(repo, "* * * * * *", "allow", misfire_grace_s=5)
    service = LocalService(repo, supervised=False)
    sched.tick(clock.now)
    _slots(sched, clock, 1, 1)  # slot 1 queues a run
    [first_run] = repo.list_runs(task.id)
    repo.claim_attempt(first_run)  # it starts: the next slot queues one more, then the bound
    _slots(sched, clock, 2, 5)  # slot 2 queued, 3..5 backlog_full
    service.run_now(task.name)  # a manual run: not a slot, not in the timeline
    clock.advance(HOUR)  # serve was down for an hour: the missed slots are skipped
    sched.tick(clock.now)

    page = _page(service, task.name)
    assert page["task"]["name"] == task.name and page["next"] is None
    outcomes = [(e["outcome"], e["slot_count"]) for e in page["items"]]
    # the missed slots, then the latest slot (fired late: at the bound again), earlier ones
    assert outcomes == [("skipped_downtime", 1000), ("backlog_full", 1), ("backlog_full", 3),
                        ("run_created", 1), ("run_created", 1)]
    downtime, late, backlog, second, first = page["items"]
    assert downtime["reason"] == "misfire" and downtime["at_least"] is True
    assert downtime["first_slot"] == _iso(T0 + 6_000)
    assert late["first_slot"] == _iso(T0 + HOUR + 5_000)
    assert (backlog["first_slot"], backlog["last_slot"]) == (_iso(T0 + 3_000),
                                                              _iso(T0 + 5_000))
    assert backlog["run"] is None
    assert first["first_slot"] == _iso(T0 + 1_000)
    assert first["run"] == {"id": first_run.id, "number": first_run.number,
                            "status": "dispatching"}
    assert second["run"]["status"] == "queued" and second["first_slot"] == _iso(T0 + 2_000)


def test_pages_follow_the_keyset_without_repeating_or_skipping(
        env: tuple[LocalRunRepository, Clocks, Scheduler]) -> None:
    repo, clock, sched = env
    task = make_task(repo, "* * * * * *", "allow")
    service = LocalService(repo, supervised=False)
    sched.tick(clock.now)
    for step in range(1, 6):  # five runs, each started before the next slot
        _slots(sched, clock, step, step)
        repo.claim_attempt(repo.list_runs(task.id)[0])
    seen: list[str] = []
    cursor = None
    while True:
        page = _page(service, task.name, before=cursor, limit=2)
        seen += [e["first_slot"] for e in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert seen == [_iso(T0 + s * 1_000) for s in range(5, 0, -1)]


def test_a_coalesced_range_names_the_queued_run_it_joined(
        env: tuple[LocalRunRepository, Clocks, Scheduler]) -> None:
    repo, clock, sched = env
    task = make_task(repo, "* * * * * *", "forbid")
    sched.tick(clock.now)
    _slots(sched, clock, 1, 4)  # slot 1 queues; 2..4 join it (nothing starts it)
    [queued] = repo.list_runs(task.id)
    [joined, created] = _page(LocalService(repo, supervised=False), task.name)["items"]
    assert (joined["outcome"], joined["slot_count"]) == ("coalesced", 3)
    assert joined["run"]["id"] == queued.id and created["run"]["id"] == queued.id


def test_an_unknown_task_bad_cursor_or_limit_is_refused(
        env: tuple[LocalRunRepository, Clocks, Scheduler]) -> None:
    repo, _clock, _sched = env
    task = make_task(repo, "0 8 * * *")
    service = LocalService(repo, supervised=False)
    assert _page(service, task.name) == {"task": {
        "name": task.name, "schedule": "0 8 * * *", "timezone": task.timezone,
        "enabled": True}, "items": [], "next": None}
    with pytest.raises(NotFoundError):
        _page(service, "没有这个任务")
    with pytest.raises(ValidationError):
        _page(service, task.name, before="not-an-id")
    with pytest.raises(ValidationError):
        _page(service, task.name, limit=0)
