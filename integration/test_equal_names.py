"""Names equal under the name rule are one name (docs/protocols.md §4.5 "Names",
``shared/names.py``: NFKC case-folding), through the real `ql3 local`: `Backup1` is found
as `backup1` and full-width `ＪＤ１` as `jd1` by `runs --task`, `logs NAME@last` and
`logs NAME#N`, as by `task show`/`run`/`rm`; the answers name the task as it is stored."""

from __future__ import annotations

import pytest

from harness import Ql3

PAIRS = [("Backup1", "backup1"), ("ＪＤ１", "jd1")]


def _add_and_run(ql3: Ql3, stored: str) -> None:
    ql3.run("local", "task", "add", stored, "--schedule", "@once", "--",
            "sh", "-c", "echo hello from the task")
    ql3.run("local", "run", stored)


@pytest.mark.parametrize(("stored", "typed"), PAIRS)
def test_runs_and_logs_find_a_task_by_an_equal_name(
    ql3: Ql3, stored: str, typed: str
) -> None:
    _add_and_run(ql3, stored)
    runs = ql3.json("local", "runs", "--task", typed)
    assert [(r["task"], r["number"]) for r in runs] == [(stored, 1)]
    assert ql3.run("local", "logs", f"{typed}@last").stdout == "hello from the task\n"
    assert ql3.run("local", "logs", f"{typed}#1").stdout == "hello from the task\n"


@pytest.mark.parametrize(("stored", "typed"), PAIRS)
def test_rm_by_an_equal_name_says_the_stored_name_and_the_history_stays_findable(
    ql3: Ql3, stored: str, typed: str
) -> None:
    _add_and_run(ql3, stored)
    assert ql3.run("local", "task", "rm", typed).stdout == f"removed task {stored}\n"
    # the name comes back in the other spelling: one name, one history, one numbering
    _add_and_run(ql3, typed)
    runs = ql3.json("local", "runs", "--task", stored)
    assert [(r["task"], r["number"]) for r in runs] == [(typed, 2), (stored, 1)]  # newest first
    assert ql3.run("local", "logs", f"{stored}#1").stdout == "hello from the task\n"
    assert "run " + typed + "#2 " in ql3.run("local", "inspect", f"{stored}@last").stdout


@pytest.mark.parametrize(("stored", "typed"), PAIRS)
def test_adding_an_equal_name_is_refused_naming_the_existing_task(
    ql3: Ql3, stored: str, typed: str
) -> None:
    ql3.run("local", "task", "add", stored, "--schedule", "@once", "--", "true")
    done = ql3.run("local", "task", "add", typed, "--schedule", "@once", "--", "true",
                   check=False)
    assert done.returncode != 0 and done.stdout == ""
    assert f"'{stored}'" in done.stderr
