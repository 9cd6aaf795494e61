"""The composition root's start and stop order, and the disabled application (ADR-0069 §5)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from qinglong.local.app.datadir import DataDir
from qinglong.local.app.local_application import LocalApplication
from qinglong.local.storage.migrations import open_database
from qinglong.shared.errors import DataDirectoryBusyError


def _initialised(tmp_path: Path) -> DataDir:
    datadir = DataDir.at(str(tmp_path / "data"))
    datadir.create()
    open_database(datadir.db_path).close()
    return datadir


def test_start_and_stop_follow_the_adr_order(tmp_path: Path) -> None:
    app = LocalApplication(_initialised(tmp_path))
    app.start()
    assert os.path.exists(app.datadir.socket_path)
    app.stop()
    app.stop()  # idempotent
    assert app.steps == [
        "storage", "assembly", "run_recovery", "cleanup_page", "domain_recovery",
        "lifecycles", "admission", "active",
        "admission_drained", "lifecycles_stopped", "stack_stopped", "storage_closed",
    ]
    assert not os.path.exists(app.datadir.socket_path)


def test_a_disabled_application_creates_no_store_thread_or_socket(tmp_path: Path) -> None:
    datadir = DataDir.at(str(tmp_path / "never"))
    threads = threading.active_count()
    app = LocalApplication(datadir, enabled=False)
    app.start()
    assert app.store is None and app.stack is None
    assert threading.active_count() == threads
    assert not os.path.exists(datadir.root)  # not even the directory or a database handle
    app.stop()
    assert app.steps == ["disabled"]


def test_a_failed_start_undoes_what_it_did_and_releases_the_directory(tmp_path: Path) -> None:
    datadir = _initialised(tmp_path)
    first = LocalApplication(datadir)
    first.start()
    try:
        second = LocalApplication(datadir)
        with pytest.raises(DataDirectoryBusyError):
            second.start()
        assert second.store is None
    finally:
        first.stop()
    third = LocalApplication(datadir)  # the lock was released by the stop
    third.start()
    third.stop()


def test_stop_without_start_is_harmless(tmp_path: Path) -> None:
    app = LocalApplication(DataDir.at(str(tmp_path / "x")))
    app.stop()
    assert app.steps == []
