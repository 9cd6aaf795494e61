"""Renaming a local task and editing its labels through the real `ql3` (README "task edit"):
``task edit NAME --name NEW --label L --unset-label L`` keeps the task's id, runs and
numbering, records the old and new name and labels in its ``task_edited`` event, and refuses
a name another task holds — live, or removed with runs numbered under it — changing nothing."""

from __future__ import annotations

from typing import Any

import pytest

from harness import Ql3

pytestmark = pytest.mark.integration


def _show(ql3: Ql3, name: str) -> dict[str, Any]:
    view: dict[str, Any] = ql3.json("local", "task", "show", name)
    return view


def test_rename_and_relabel_keep_the_id_runs_and_numbering_at_80_columns(ql3: Ql3) -> None:
    ql3.env["COLUMNS"] = "80"
    ql3.run("local", "task", "add", "签到", "--schedule", "0 8 * * *", "--label", "日常",
            "--label", "旧", "--", "sh", "-c", "echo 签到成功")
    before = _show(ql3, "签到")
    ql3.run("local", "run", "签到")
    done = ql3.run("local", "task", "edit", "签到", "--name", "京东签到", "--label", "京东",
                   "--unset-label", "旧")
    assert done.stdout == "renamed task 签到 to 京东签到\nedited task 京东签到: name, labels\n"
    after = _show(ql3, "京东签到")
    assert (after["id"], after["labels"]) == (before["id"], ["日常", "京东"])
    assert len(after["recent_runs"]) == 1 and after["recent_runs"][0]["task"] == "京东签到"
    detail = next(e for e in after["events"] if e["kind"] == "task_edited")["detail"]
    assert detail["name"] == {"from": "签到", "to": "京东签到"}
    assert detail["labels"] == {"from": ["日常", "旧"], "to": ["日常", "京东"]}
    assert ql3.run("local", "logs", "京东签到#1").stdout == "签到成功\n"
    gone = ql3.run("local", "task", "show", "签到", check=False)
    assert gone.returncode == 2 and "no such task '签到'" in gone.stderr
    assert ql3.json("local", "run", "京东签到")["number"] == 2  # the count goes on
    listed = ql3.run("local", "task", "list").stdout.splitlines()
    row = next(line for line in listed if line.startswith("京东签到"))
    assert "日常" in row and "旧" not in row
    assert ql3.run("local", "task", "list", "--search", "京东签到").stdout.count("京东签到") == 1
    only_labels = ql3.run("local", "task", "edit", "京东签到", "--unset-label", "日常",
                          "--unset-label", "京东")
    assert only_labels.stdout == "edited task 京东签到: labels\n"
    assert _show(ql3, "京东签到")["labels"] == []


def test_a_name_taken_or_holding_a_removed_tasks_runs_is_refused_and_nothing_changes(
    ql3: Ql3,
) -> None:
    ql3.run("local", "task", "add", "京东签到", "--schedule", "0 8 * * *", "--", "true")
    ql3.run("local", "task", "add", "淘宝签到", "--schedule", "0 9 * * *", "--", "true")
    ql3.run("local", "task", "add", "旧任务", "--schedule", "@once", "--", "true")
    ql3.run("local", "run", "旧任务")
    ql3.run("local", "task", "rm", "旧任务")
    for new, says in (("淘宝签到", "already exists"), ("旧任务", "keeps its runs"),
                      ("bad/name", "use 1-128 characters")):
        result = ql3.run("local", "task", "edit", "京东签到", "--name", new, check=False)
        assert result.returncode != 0 and says in result.stderr, (new, result.stderr)
    missing = ql3.run("local", "task", "edit", "京东签到", "--unset-label", "无此标签",
                      check=False)
    assert missing.returncode == 2 and "the task has no label 无此标签" in missing.stderr
    assert not [e for e in _show(ql3, "京东签到")["events"] if e["kind"] == "task_edited"]
    ql3.run("local", "task", "add", "Backup", "--schedule", "@once", "--", "true")
    assert "renamed task Backup to backup" in ql3.run(
        "local", "task", "edit", "Backup", "--name", "backup").stdout  # its own key: fine
