"""The local task search in SQL (``TaskQueries.search_tasks``, bench/README.md ``--local``):
the same tasks as the panel's rule — ``needle in "\\n".join([name, *labels, *argv]).casefold()``
— without reading every row into Python."""

from __future__ import annotations

import pytest

from qinglong.local.app.task_input import TaskInput
from qinglong.local.storage.repository import LocalRunRepository

TASKS = [  # name, labels, argv: case, width and escaping cases of the rule
    ("京东签到", ("日常",), ("sh", "-c", "echo 淘宝签到")),
    ("Straße", (), ("echo", 'say "hi"')),
    ("KELVIN-\u212a", ("env=PROD",), ("node", "C:\\x.js")),
    ("ＪＤ-full", ("Σ-label",), ("python3", "jd.py")),
    ("plain", (), ("true",)),
]
NEEDLES = ["签到", "淘宝", "日常", "ss", "STRASSE".casefold(), "k", "kelvin-k", "jd", "ｊｄ",
           "σ-", '"hi"', "\\x", "c:", "env=prod", "-", "true", "nothing", "u", "t"]


def _rule(repo: LocalRunRepository, needle: str) -> list[str]:
    return [t.name for t in repo.list_tasks()
            if needle in "\n".join([t.name, *t.labels, *t.argv]).casefold()]


@pytest.fixture
def seeded(repo: LocalRunRepository) -> LocalRunRepository:
    for name, labels, argv in TASKS:
        repo.create_task(TaskInput(name=name, argv=argv, schedule="0 3 * * *",
                                   labels=labels).to_task())
    repo.create_task(TaskInput(name="removed 签到", argv=("true",),
                               schedule="0 3 * * *").to_task())
    repo.remove_task("removed 签到")
    return repo


@pytest.mark.parametrize("needle", NEEDLES)
def test_search_in_sql_finds_what_the_python_rule_finds(seeded: LocalRunRepository,
                                                        needle: str) -> None:
    page, total = seeded.search_tasks(needle, 0, 200)
    assert [t.name for t in page] == _rule(seeded, needle)
    assert total == len(page)


def test_search_pages_by_name_with_the_whole_total(seeded: LocalRunRepository) -> None:
    every = _rule(seeded, "-")
    assert len(every) >= 3
    page, total = seeded.search_tasks("-", 1, 1)
    assert ([t.name for t in page], total) == (every[1:2], len(every))
    assert seeded.search_tasks("-", 50, 10) == ([], len(every))  # past the end: total still
    whole = seeded.search_tasks("签到", 0, 1)[0][0]
    assert whole.labels == ("日常",) and whole.argv == ("sh", "-c", "echo 淘宝签到")
