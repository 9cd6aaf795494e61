"""Renaming a task and editing its labels in place (``apply_changes`` + ``edit_task``): the
name follows shared/names.py's rule and key, labels its free-label rule; one transaction,
the same id, and a refusal when the name is another task's."""

from __future__ import annotations

import pytest

from qinglong.local.app.task_changes import apply_changes
from qinglong.local.app.task_input import TaskInput
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Trigger
from qinglong.shared.errors import ConflictError, ValidationError


def _add(repo: LocalRunRepository, name: str, *labels: str) -> None:
    repo.create_task(TaskInput(name=name, argv=("true",), schedule="0 3 * * *",
                               labels=labels).to_task())


def test_a_rename_keeps_the_id_and_moves_the_name_key(repo: LocalRunRepository) -> None:
    _add(repo, "签到", "日常")
    old = repo.get_task("签到")
    new, detail = apply_changes(old, {"name": "京东签到１"})
    stored = repo.edit_task(old, new, detail)
    assert (stored.id, stored.name, stored.labels) == (old.id, "京东签到１", ("日常",))
    assert detail == {"changed": ["name"], "name": {"from": "签到", "to": "京东签到１"}}
    assert repo.get_task("京东签到1").id == old.id  # found by its key, full width or not
    _add(repo, "签到")  # the old name is free again


def test_labels_replace_add_and_unset_by_the_free_label_rule(repo: LocalRunRepository) -> None:
    _add(repo, "签到", "日常", "旧")
    old = repo.get_task("签到")
    new, detail = apply_changes(old, {"labels_unset": ["旧"], "labels_add": ["京东", "日常"]})
    assert new.labels == ("日常", "京东")
    assert detail["labels"] == {"from": ["日常", "旧"], "to": ["日常", "京东"]}
    stored = repo.edit_task(old, new, detail)
    assert repo.get_task("签到").labels == stored.labels == ("日常", "京东")
    cleared, _ = apply_changes(stored, {"labels": []})
    assert cleared.labels == ()
    for bad in ({"labels": ["a\tb"]}, {"labels_unset": ["无"]}, {"name": "a/b"}):
        with pytest.raises(ValidationError):
            apply_changes(stored, bad)


def test_a_name_of_another_live_task_or_of_a_removed_one_with_runs_is_refused(
    repo: LocalRunRepository,
) -> None:
    for name in ("签到", "淘宝", "旧", "空"):
        _add(repo, name)
    repo.create_run(repo.get_task("旧").id, Trigger.MANUAL)
    repo.db.write(lambda c: c.execute(  # as if it ran: a finished run keeps its number
        "UPDATE runs SET status = 'cancelled', finished_at_ms = created_at_ms"))
    repo.remove_task("旧")
    repo.remove_task("空")  # removed without runs: its name may be taken
    old = repo.get_task("签到")
    for taken, says in (("淘宝", "already exists"), ("旧", "keeps its runs")):
        new, detail = apply_changes(old, {"name": taken})
        with pytest.raises(ConflictError, match=says):
            repo.edit_task(old, new, detail)
    assert repo.get_task("签到").version == old.version
    new, detail = apply_changes(old, {"name": "空"})
    assert repo.edit_task(old, new, detail).name == "空"
