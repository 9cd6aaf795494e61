"""The run repository: compare-and-set transitions with their events (docs/architecture.md §2)."""

from __future__ import annotations

import pytest
from storage_helpers import make_task

from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Trigger
from qinglong.shared.errors import (
    ConcurrentUpdateError,
    ConflictError,
    InvalidTransitionError,
    NotFoundError,
)
from qinglong.shared.statuses import AttemptStatus, RunStatus


def _running(repo: LocalRunRepository, name: str = "t"):  # type: ignore[no-untyped-def]
    task = make_task(repo, name)
    run = repo.create_run(task.id, Trigger.MANUAL)
    assert run is not None
    attempt = repo.claim_attempt(run)
    attempt = repo.record_start_intent(attempt, log_path="/l", deadline_at_ms=None)
    repo.register(run.id, attempt.id, "/r")
    attempt = repo.save_handle(attempt, "h")
    return task, run, attempt


def test_a_run_is_created_once_per_task_and_slot(repo: LocalRunRepository) -> None:
    task = make_task(repo)
    assert repo.create_run(task.id, Trigger.SCHEDULE, scheduled_at_ms=1000) is not None
    assert repo.create_run(task.id, Trigger.SCHEDULE, scheduled_at_ms=1000) is None
    assert repo.create_run(task.id, Trigger.SCHEDULE, scheduled_at_ms=2000) is not None
    assert len(repo.list_runs(task.id)) == 2


def test_a_stale_version_loses_the_compare_and_set(repo: LocalRunRepository) -> None:
    _, run, attempt = _running(repo)
    repo.finish_attempt(attempt, AttemptStatus.SUCCEEDED, exit_code=0)
    with pytest.raises(ConcurrentUpdateError):
        repo.finish_attempt(attempt, AttemptStatus.FAILED, exit_code=1)
    assert repo.get_run(run.id).status is RunStatus.SUCCEEDED


def test_a_transition_outside_the_table_changes_nothing(repo: LocalRunRepository) -> None:
    task = make_task(repo)
    run = repo.create_run(task.id, Trigger.MANUAL)
    assert run is not None
    attempt = repo.claim_attempt(run)
    events_before = len(repo.list_events(run.id))
    with pytest.raises(InvalidTransitionError):
        repo.save_handle(attempt, "h")  # claimed -> running skips starting
    assert repo.get_attempt(attempt.id).status is AttemptStatus.CLAIMED
    assert len(repo.list_events(run.id)) == events_before


def test_each_transition_writes_a_run_and_an_attempt_event(repo: LocalRunRepository) -> None:
    _, run, attempt = _running(repo)
    repo.finish_attempt(attempt, AttemptStatus.FAILED, exit_code=3)
    kinds = [e.kind for e in repo.list_events(run.id)]
    assert kinds == [
        "run_created", "run_dispatching", "attempt_claimed", "attempt_starting",
        "attempt_running", "run_running", "attempt_failed", "run_failed",
    ]
    final = repo.get_run(run.id)
    assert (final.status, final.exit_code, final.attempts[0].exit_code) == (RunStatus.FAILED, 3, 3)


def test_a_retry_returns_the_run_to_queued_and_the_next_attempt_gets_the_next_number(
    repo: LocalRunRepository,
) -> None:
    _, _run, attempt = _running(repo)
    back = repo.finish_attempt(attempt, AttemptStatus.LOST, retry_not_before_ms=123)
    assert back.status is RunStatus.QUEUED and back.not_before_ms == 123
    second = repo.claim_attempt(back)
    assert second.number == 2


def test_register_is_idempotent_and_refuses_conflicts_and_strangers(
    repo: LocalRunRepository,
) -> None:
    _, run, attempt = _running(repo)
    repo.register(run.id, attempt.id, "/r")
    assert repo.journal_rows() == [(attempt.id, "pending", "/r")]
    with pytest.raises(ConflictError):
        repo.register(run.id, attempt.id, "/other")
    other_task = make_task(repo, "other")
    other = repo.create_run(other_task.id, Trigger.MANUAL)
    assert other is not None
    with pytest.raises(NotFoundError):
        repo.register(other.id, attempt.id, "/r")


def test_inspect_candidates_reports_257_as_256_and_truncated(repo: LocalRunRepository) -> None:
    task = make_task(repo)
    ids = []
    for slot in range(257):
        run = repo.create_run(task.id, Trigger.SCHEDULE, scheduled_at_ms=slot)
        assert run is not None
        repo.claim_attempt(run)
        ids.append(run.id)
    page = repo.inspect_candidates(256)
    assert page.truncated
    assert [c.run_id for c in page.candidates] == sorted(ids)[:256]
    assert all(c.active_attempt_count == 1 for c in page.candidates)
    assert repo.inspect_candidates(256).candidates[0].run_status is not RunStatus.QUEUED


@pytest.mark.parametrize("limit", [0, 257, -1])
def test_inspect_candidates_limit_must_be_1_to_256(repo: LocalRunRepository, limit: int) -> None:
    with pytest.raises(ValueError):
        repo.inspect_candidates(limit)


def test_legacy_and_queued_runs_are_not_candidates(repo: LocalRunRepository) -> None:
    task = make_task(repo)
    repo.create_run(task.id, Trigger.MANUAL)
    run = repo.create_run(task.id, Trigger.SCHEDULE, scheduled_at_ms=5)
    assert run is not None
    repo.claim_attempt(run)
    repo.db.write(lambda c: c.execute("UPDATE runs SET owner = 'legacy' WHERE id = ?", (run.id,)))
    assert repo.inspect_candidates(10).candidates == ()


def test_duplicate_task_names_conflict_and_removal_frees_the_name(
    repo: LocalRunRepository,
) -> None:
    make_task(repo, "dup")
    with pytest.raises(ConflictError):
        make_task(repo, "dup")
    repo.remove_task("dup")
    make_task(repo, "dup")
    assert [t.name for t in repo.list_tasks()] == ["dup"]


def test_a_task_with_a_queued_run_cannot_be_removed(repo: LocalRunRepository) -> None:
    task = make_task(repo, "busy")
    repo.create_run(task.id, Trigger.MANUAL)
    with pytest.raises(ConflictError):
        repo.remove_task("busy")
