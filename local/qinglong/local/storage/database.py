"""The one SQLite connection of a data directory, behind a serial operation queue.

docs/protocols.md §3.1 / ADR-0067 §2: one ``sqlite3`` connection per database file (WAL,
``synchronous=FULL``), owned by one object. Every operation goes through one serial queue
with at most 256 pending operations (the 257th fails fast with :class:`StorageBusyError`)
and a close fence (after :meth:`Database.close`, every call fails with
:class:`StorageClosedError`; close waits for in-flight work). No second connection and no
background thread that opens its own.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from typing import TypeVar

from qinglong.shared.errors import (
    DiskFullError,
    QinglongError,
    StorageBusyError,
    StorageClosedError,
    StorageError,
)

T = TypeVar("T")

MAX_PENDING_OPERATIONS = 256
BUSY_TIMEOUT_MS = 5000


class Database:
    """Owner of one SQLite connection; runs operations one at a time.

    ``path`` is the database file. Construction opens the connection (WAL journal,
    ``synchronous=FULL`` so every commit is durable before it returns, foreign keys on).
    Use :func:`qinglong.local.storage.migrations.open_database` to get a migrated one.

    Raises:
        StorageError: the file cannot be opened or configured.
    """

    def __init__(self, path: str, *, max_pending: int = MAX_PENDING_OPERATIONS) -> None:
        self.path = path
        self._max_pending = max_pending
        self._cond = threading.Condition()
        self._op_lock = threading.Lock()
        self._pending = 0
        self._closed = False
        _private_files(path)
        try:
            conn = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise _storage_error(exc, self.path) from exc
        self._conn: sqlite3.Connection | None = conn

    # -- the serial queue -------------------------------------------------------------

    def _enter(self) -> None:
        with self._cond:
            if self._closed:
                raise StorageClosedError("the store is closed")
            if self._pending >= self._max_pending:
                raise StorageBusyError("the store has 256 pending operations")
            self._pending += 1

    def _leave(self) -> None:
        with self._cond:
            self._pending -= 1
            self._cond.notify_all()

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in a read transaction, serially with every other operation.

        Raises StorageClosedError, StorageBusyError, StorageError (any sqlite3 error).
        Typed errors raised by ``fn`` pass through unchanged.
        """
        return self._run(fn, "BEGIN")

    def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction and commit durably.

        On any exception the transaction rolls back and nothing of ``fn`` stays. When this
        returns, the commit is on disk (``synchronous=FULL``): it may fence a side effect.
        """
        return self._run(fn, "BEGIN IMMEDIATE")

    def _run(self, fn: Callable[[sqlite3.Connection], T], begin: str) -> T:
        self._enter()
        try:
            with self._op_lock:
                conn = self._conn
                if conn is None:
                    raise StorageClosedError("the store is closed")
                try:
                    conn.execute(begin)
                    try:
                        result = fn(conn)
                        conn.execute("COMMIT")
                    except BaseException:
                        if conn.in_transaction:
                            conn.execute("ROLLBACK")
                        raise
                except QinglongError:
                    raise
                except sqlite3.Error as exc:
                    raise _storage_error(exc, self.path) from exc
                return result
        finally:
            self._leave()

    def run_script(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` serially with no transaction opened for it (migrations only)."""
        self._enter()
        try:
            with self._op_lock:
                if self._conn is None:
                    raise StorageClosedError("the store is closed")
                try:
                    return fn(self._conn)
                except QinglongError:
                    raise
                except sqlite3.Error as exc:
                    raise _storage_error(exc, self.path) from exc
        finally:
            self._leave()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has begun."""
        return self._closed

    def close(self, timeout_s: float | None = None) -> None:
        """Refuse new operations, wait for in-flight ones (up to ``timeout_s``), close.

        Idempotent.
        """
        with self._cond:
            self._closed = True
            self._cond.wait_for(lambda: self._pending == 0, timeout=timeout_s)
        with self._op_lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _private_files(path: str) -> None:
    """Create the database file 0600 before SQLite does (SQLite gives its -wal and -shm
    files the database file's mode), and make existing ones 0600: the store holds secrets."""
    if path == ":memory:":
        return
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        for name in (path, path + "-wal", path + "-shm"):
            if os.path.exists(name):
                os.chmod(name, 0o600)
    except OSError as exc:
        raise StorageError("the database file cannot be opened privately") from exc


def _storage_error(exc: sqlite3.Error, path: str) -> StorageError:
    """Map a sqlite3 error to a typed StorageError with a message free of user data.

    SQLite reports ENOSPC during a WAL write as a generic "disk I/O error"; when the
    filesystem holding the database has no free block left, that is DiskFullError.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    text = str(exc).lower()
    if code == sqlite3.SQLITE_FULL or "disk is full" in text or (
        ("i/o error" in text or code == sqlite3.SQLITE_IOERR) and _no_space_left(path)
    ):
        return DiskFullError("the disk is full: the local store could not write")
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text:
        return StorageError("the database is locked by another process")
    if isinstance(exc, sqlite3.IntegrityError):
        return StorageError(f"constraint violated: {exc}")
    return StorageError(f"local store failure: {type(exc).__name__}: {exc}")


def _no_space_left(path: str) -> bool:
    """True when the filesystem of ``path`` has less than 64 KiB available."""
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 * 1024
