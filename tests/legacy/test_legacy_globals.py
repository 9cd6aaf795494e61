"""Global variables (migration 0002): the repository methods, and the coordinator reading
the current variables at every start of an assembled stack."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from qinglong.local.app.application import LocalStack
from qinglong.local.app.datadir import DataDir
from qinglong.local.app.store import LocalStore
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import ValidationError


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[LocalRunRepository]:
    db = open_database(str(tmp_path / "ql3.db"))
    yield LocalRunRepository(db, clock=lambda: 1_000)
    db.close()


def test_set_and_read_global_variables(repo: LocalRunRepository) -> None:
    assert repo.global_variables() == {}
    assert repo.set_global_variable("A_TOKEN", "s3cret", "qinglong2") is True
    assert repo.set_global_variable("A_TOKEN", "s3cret", "qinglong2") is False  # unchanged
    assert repo.set_global_variable("B", "", "manual") is True
    assert repo.set_global_variable("A_TOKEN", "other", "qinglong2") is True
    assert repo.global_variables() == {"A_TOKEN": "other", "B": ""}
    assert repo.list_global_variables() == [("A_TOKEN", "qinglong2", 1_000), ("B", "manual", 1_000)]


@pytest.mark.parametrize(("name", "value"), [("1BAD", "hidden"), ("A-B", "hidden"),
                                             ("", "hidden"), ("OK", "hidden\x00value")])
def test_bad_variables_are_refused_without_echoing_the_value(
    repo: LocalRunRepository, name: str, value: str
) -> None:
    with pytest.raises(ValidationError) as info:
        repo.set_global_variable(name, value, "test")
    assert "hidden" not in str(info.value)
    assert repo.global_variables() == {}


def test_the_stack_passes_the_current_variables_at_every_start(tmp_path: Path) -> None:
    datadir = DataDir.at(str(tmp_path / "data"))
    datadir.create()
    open_database(datadir.db_path).close()
    store = LocalStore(datadir, "test")
    try:
        stack = LocalStack(store, grace_s=1.0)
        service = stack.service()
        store.repo.set_global_variable("QL3_TEST_GLOBAL", "first", "test")
        service.task_add({"name": "echo", "schedule": "@once", "cwd": str(tmp_path),
                          # upper-cased: a secret global's value is masked in the log
                          "argv": ["sh", "-c",
                                   'echo "got=$QL3_TEST_GLOBAL" | tr a-z A-Z']})
        logs = []
        for value in ("first", "second"):
            store.repo.set_global_variable("QL3_TEST_GLOBAL", value, "test")
            run = service.run_now("echo")
            assert stack.supervise(run["id"], threading.Event()).status.value == "succeeded"
            logs.append(service.logs_read(run["id"])["data"])
        stack.coordinator.drain()
        assert logs == ["GOT=FIRST\n", "GOT=SECOND\n"]
    finally:
        store.close()
