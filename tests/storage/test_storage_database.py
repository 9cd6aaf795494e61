"""The serial operation queue, its 256 cap and the close fence (docs/protocols.md §3.1)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from qinglong.local.storage.database import MAX_PENDING_OPERATIONS, Database
from qinglong.shared.errors import StorageBusyError, StorageClosedError, StorageError


def test_the_257th_pending_operation_fails_fast_with_storage_busy(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "q.db"))
    release = threading.Event()
    entered = threading.Event()

    def blocker(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)

    threads = [threading.Thread(target=db.read, args=(blocker,))]
    threads[0].start()
    assert entered.wait(5)
    for _ in range(MAX_PENDING_OPERATIONS - 1):
        t = threading.Thread(target=db.read, args=(lambda c: c.execute("SELECT 1").fetchone(),))
        t.start()
        threads.append(t)
    deadline = time.monotonic() + 5
    while db._pending < MAX_PENDING_OPERATIONS and time.monotonic() < deadline:
        time.sleep(0.01)
    assert db._pending == MAX_PENDING_OPERATIONS
    started = time.monotonic()
    with pytest.raises(StorageBusyError):
        db.read(lambda c: c.execute("SELECT 1").fetchone())
    assert time.monotonic() - started < 5, "refused at once, not queued behind the 10 s blocker"
    release.set()
    for t in threads:
        t.join(10)
    assert db.read(lambda c: c.execute("SELECT 2").fetchone()) == (2,)
    db.close()


def test_close_waits_for_in_flight_work_then_refuses_every_call(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "c.db"))
    db.write(lambda c: c.execute("CREATE TABLE t (x INTEGER)"))
    entered = threading.Event()
    release = threading.Event()

    def slow(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(5)
        conn.execute("INSERT INTO t VALUES (1)")

    worker = threading.Thread(target=db.write, args=(slow,))
    worker.start()
    assert entered.wait(5)
    closer = threading.Thread(target=db.close)
    closer.start()
    time.sleep(0.1)
    assert closer.is_alive(), "close must wait for the in-flight operation"
    with pytest.raises(StorageClosedError):
        db.read(lambda c: None)
    release.set()
    worker.join(5)
    closer.join(5)
    assert not closer.is_alive()
    with pytest.raises(StorageClosedError):
        db.write(lambda c: None)
    db.close()  # idempotent
    check = sqlite3.connect(str(tmp_path / "c.db"))
    assert check.execute("SELECT count(*) FROM t").fetchone() == (1,)
    check.close()


def test_a_failed_write_rolls_back_everything_it_did(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "r.db"))
    db.write(lambda c: c.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)"))

    def half(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("INSERT INTO t VALUES (1)")

    with pytest.raises(StorageError):
        db.write(half)
    assert db.read(lambda c: c.execute("SELECT count(*) FROM t").fetchone()) == (0,)
    db.close()


def test_connection_is_wal_with_full_synchronous_commits(tmp_path: Path) -> None:
    db = Database(str(tmp_path / "w.db"))
    assert db.read(lambda c: c.execute("PRAGMA journal_mode").fetchone()) == ("wal",)
    assert db.read(lambda c: c.execute("PRAGMA synchronous").fetchone()) == (2,)
    db.close()


def test_the_database_and_its_wal_files_are_private_even_in_a_shared_directory(
    tmp_path: Path,
) -> None:
    import os
    import stat

    from qinglong.local.storage.migrations import open_database

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    old = os.umask(0o022)
    try:
        db = open_database(str(shared / "ql3.db"))
        db.write(lambda c: c.execute("INSERT INTO settings VALUES ('k', 'secret')"))
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in shared.iterdir()}
        db.close()
    finally:
        os.umask(old)
    assert modes["ql3.db"] == 0o600
    assert all(mode == 0o600 for name, mode in modes.items() if name.startswith("ql3.db-"))
