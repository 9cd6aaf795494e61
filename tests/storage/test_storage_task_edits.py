"""Editing a task in place (issue 12 item 1): one compare-and-set transaction."""

from __future__ import annotations

import dataclasses

import pytest

from qinglong.local.app.task_changes import apply_changes
from qinglong.local.app.task_input import TaskInput
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import ConcurrentUpdateError, NotFoundError


def _add(repo: LocalRunRepository, schedule: str = "0 3 * * *") -> None:
    repo.create_task(TaskInput(name="t", argv=("true",), schedule=schedule).to_task())


def test_a_new_schedule_counts_from_the_edit_and_is_marked_pending(
    repo: LocalRunRepository,
) -> None:
    _add(repo)
    old = repo.get_task("t")
    new, detail = apply_changes(old, {"schedule": "30 2 * * *"})
    edit_at = old.updated_at_ms + 5_000
    repo.clock = lambda: edit_at
    stored = repo.edit_task(old, new, detail)
    assert (stored.id, stored.schedule, stored.version) == (old.id, "30 2 * * *", old.version + 1)
    assert stored.schedule_cursor_ms == edit_at
    assert repo.next_fire_of(old.id) == (None, "new")


def test_an_edit_that_leaves_the_schedule_keeps_the_stored_next_fire_time(
    repo: LocalRunRepository,
) -> None:
    _add(repo)
    repo.db.write(lambda c: c.execute(
        "UPDATE tasks SET next_fire_pending = NULL, next_fire_at_ms = 42"))
    old = repo.get_task("t")
    new, detail = apply_changes(old, {"timeout_s": 5.0})
    stored = repo.edit_task(old, new, detail)
    assert (stored.version, stored.timeout_s) == (old.version, 5.0)
    assert repo.next_fire_of(old.id) == (42, None)


def test_an_edit_loses_to_a_change_made_meanwhile_and_to_a_removal(
    repo: LocalRunRepository,
) -> None:
    _add(repo)
    old = repo.get_task("t")
    new, detail = apply_changes(old, {"max_attempts": 3})
    repo.set_task_enabled("t", False)
    with pytest.raises(ConcurrentUpdateError):
        repo.edit_task(old, new, detail)
    repo.remove_task("t")
    with pytest.raises(NotFoundError, match="no such task 't'"):
        repo.edit_task(old, dataclasses.replace(new), detail)
    assert repo.get_task_by_id(old.id).max_attempts == 1
