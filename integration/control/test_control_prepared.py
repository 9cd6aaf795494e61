"""``db/prepared.py`` on real PostgreSQL: statements prepared per connection and run over
psycopg's libpq binding, with psycopg's adapters and psycopg's exceptions."""

from __future__ import annotations

import gc
import os
import signal
import threading
import time
import weakref
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from pg_control_db import PgDb, admin
from psycopg import errors
from psycopg.pq import TransactionStatus

from qinglong.control.db.pool import connect
from qinglong.control.db.prepared import Statements, positional

QUERIES = {
    "insert": "INSERT INTO t (id, at, note) VALUES (%(id)s, %(at)s, %(note)s)",
    "select": "SELECT id, at, note FROM t WHERE id >= %(low)s ORDER BY id",
    "lock": "SELECT id FROM t WHERE id = %(id)s FOR UPDATE",
    "sleep": "SELECT pg_sleep(%(s)s)",
    "same_twice": "SELECT %(x)s::int + %(x)s::int AS doubled, %(y)s::text AS y",
}


@pytest.fixture
def conn(empty_db: PgDb) -> Any:
    with psycopg.connect(empty_db.url, autocommit=True) as setup:
        setup.execute("CREATE TABLE t (id int PRIMARY KEY, at timestamptz, note text)")
    c = connect(empty_db.url)
    yield c
    c.close()


def _count(db: PgDb) -> int:
    with db.connect() as other:
        row = other.execute("SELECT count(*) FROM t").fetchone()
    return int(row[0]) if row else -1


def test_positional_numbers_names_in_order_and_refuses_literal_percent() -> None:
    assert positional("a %(x)s b %(y)s c %(x)s") == ("a $1 b $2 c $1", ("x", "y"))
    assert positional("SELECT 1") == ("SELECT 1", ())
    with pytest.raises(ValueError, match="'%'"):
        positional("SELECT 'a%%b' WHERE x = %(x)s")


def test_execute_dumps_parameters_and_loads_binary_rows(conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    at = datetime(2026, 11, 30, 1, 2, 3, 456789, tzinfo=UTC)
    assert st.execute(conn, "insert", {"id": 1, "at": at, "note": "a"}).rowcount == 1
    assert st.execute(conn, "insert", {"id": 2, "at": None, "note": None}).rowcount == 1
    result = st.execute(conn, "select", {"low": 0})
    assert result.column_names == ("id", "at", "note")
    assert result.rowcount == 2
    assert result.rows(tuple) == [(1, at, "a"), (2, None, None)]
    assert result.rows(tuple)[0][1].tzinfo == UTC  # the session time zone is UTC
    assert st.execute(conn, "select", {"low": 3}).first(tuple) is None
    assert st.execute(conn, "same_twice", {"x": 21, "y": "z"}).first(tuple) == (42, "z")
    with pytest.raises(KeyError):
        st.execute(conn, "select", {"high": 1})


def test_a_failed_statement_raises_the_psycopg_error_and_rolls_back(
        conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")

    def insert_twice() -> None:
        with st.transaction(conn) as tx:
            tx.execute("insert", {"id": 1, "at": None, "note": None})
            tx.execute("insert", {"id": 1, "at": None, "note": None})

    with pytest.raises(errors.UniqueViolation):
        insert_twice()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert _count(empty_db) == 0  # the first insert was rolled back with the transaction
    st.execute(conn, "insert", {"id": 1, "at": None, "note": None})  # still usable
    assert _count(empty_db) == 1


def test_a_block_that_raises_rolls_back(conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")

    def insert_then_raise() -> None:
        with st.transaction(conn) as tx:
            tx.execute("insert", {"id": 1, "at": None, "note": None})
            raise RuntimeError("fence mismatch")

    with pytest.raises(RuntimeError):
        insert_then_raise()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert _count(empty_db) == 0


def test_execute_and_commit_commits_and_ends_the_transaction(
        conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")
    with st.transaction(conn) as tx:
        tx.execute("insert", {"id": 1, "at": None, "note": None})
        last = tx.execute_and_commit("insert", {"id": 2, "at": None, "note": "b"})
        assert last.rowcount == 1
        assert conn.pgconn.transaction_status == TransactionStatus.IDLE
        assert _count(empty_db) == 2  # committed before the block ends
        with pytest.raises(psycopg.ProgrammingError, match="committed already"):
            tx.execute("insert", {"id": 3, "at": None, "note": None})  # would autocommit
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert _count(empty_db) == 2


def test_execute_and_commit_skips_the_commit_when_its_statement_fails(
        conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")

    def insert_then_commit_a_duplicate() -> None:
        with st.transaction(conn) as tx:
            tx.execute("insert", {"id": 1, "at": None, "note": None})
            tx.execute_and_commit("insert", {"id": 1, "at": None, "note": None})

    with pytest.raises(errors.UniqueViolation):
        insert_then_commit_a_duplicate()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert conn.pgconn.pipeline_status == 0
    assert _count(empty_db) == 0  # nothing committed: the first insert is gone too
    with st.transaction(conn) as tx:
        tx.execute_and_commit("insert", {"id": 1, "at": None, "note": None})
    assert _count(empty_db) == 1


def test_transaction_refuses_a_connection_that_is_not_idle(conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    conn.execute("BEGIN")
    with pytest.raises(psycopg.ProgrammingError, match="not idle"), st.transaction(conn):
        pass
    conn.execute("ROLLBACK")


def test_deallocated_statements_are_prepared_again(conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "insert", {"id": 1, "at": None, "note": None})
    conn.execute("DEALLOCATE ALL")
    # outside a transaction the call is retried once, after preparing again
    assert st.execute(conn, "select", {"low": 0}).rowcount == 1
    conn.execute("DEALLOCATE ALL")
    # inside one the error aborts the transaction, and every name is forgotten at once ...
    with pytest.raises(errors.InvalidSqlStatementName), st.transaction(conn) as tx:
        tx.execute("select", {"low": 0})
    with st.transaction(conn) as tx:  # ... so the next transaction prepares all before BEGIN
        assert tx.execute("select", {"low": 0}).rowcount == 1
        tx.execute("insert", {"id": 2, "at": None, "note": None})
    conn.execute("DEALLOCATE ALL")  # run_transaction runs such a transaction once more
    calls: list[int] = []

    def body(tx: Any) -> int:
        calls.append(1)
        return int(tx.execute("select", {"low": 0}).rowcount)

    assert st.run_transaction(conn, body) == 2 and len(calls) == 2


def test_a_lock_wait_past_lock_timeout_raises_lock_not_available(
        conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "insert", {"id": 1, "at": None, "note": None})
    conn.execute("SET lock_timeout = 200")
    with empty_db.connect() as holder, holder.transaction():
        holder.execute("SELECT id FROM t WHERE id = 1 FOR UPDATE")
        with pytest.raises(errors.LockNotAvailable), st.transaction(conn) as tx:
            tx.execute("lock", {"id": 1})
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE


def test_a_lost_connection_raises_operational_error(conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "select", {"low": 0})
    with admin() as other:
        other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):  # AdminShutdown when the reason arrived
        st.execute(conn, "select", {"low": 0})
    assert conn.closed
    with pytest.raises(psycopg.OperationalError, match="closed"), st.transaction(conn):
        pass


def test_a_connection_lost_inside_the_pipeline_is_closed(conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    pid = conn.info.backend_pid

    def terminate() -> None:
        time.sleep(0.3)
        with admin() as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))

    killer = threading.Thread(target=terminate)
    killer.start()
    with pytest.raises(psycopg.OperationalError), st.transaction(conn) as tx:
        tx.execute_and_commit("sleep", {"s": 5})
    killer.join()
    assert conn.closed


def _terminate_soon(pid: int, after_s: float = 0.3) -> threading.Thread:
    def terminate() -> None:
        time.sleep(after_s)
        with admin() as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))

    killer = threading.Thread(target=terminate)
    killer.start()
    return killer


def test_a_backend_terminated_mid_statement_raises_operational_error(conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    killer = _terminate_soon(conn.info.backend_pid)
    # AdminShutdown (57P01) when libpq kept the server's reason, else OperationalError with
    # libpq's text, which still carries it
    with pytest.raises(psycopg.OperationalError, match="administrator command"):
        st.execute(conn, "sleep", {"s": 5})
    killer.join()
    assert conn.closed


def test_ctrl_c_interrupts_a_statement_that_waits_and_closes_the_connection(
        conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        st.execute(conn, "sleep", {"s": 5})
    waited = time.monotonic() - began
    assert waited < 4, waited  # interrupted, not after the 5 s statement
    assert conn.closed  # the server aborts the statement with the session


def test_a_statement_the_server_already_holds_is_prepared_again(
        conn: Any, empty_db: PgDb) -> None:
    """A name on the server the client did not record (e.g. a signal between the server's
    answer and our bookkeeping, or another object with the same prefix) is replaced by this
    file's text, not an endless DuplicatePreparedStatement."""
    conn.execute("PREPARE t_select AS SELECT 'stale'")
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "insert", {"id": 7, "at": None, "note": None})
    with st.transaction(conn) as tx:
        assert tx.execute("select", {"low": 0}).rows(tuple) == [(7, None, None)]


def test_psycopgs_own_deallocate_all_is_survived_by_run_transaction(empty_db: PgDb) -> None:
    """psycopg sends DEALLOCATE ALL after a rollback once it auto-prepared a query (our
    configure() turns that off; a plain connection has it on)."""
    with psycopg.connect(empty_db.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, at timestamptz, note text)")
        st = Statements(QUERIES, prefix="t_")
        st.run_transaction(conn, lambda tx: tx.execute(
            "insert", {"id": 1, "at": None, "note": None}))
        for _ in range(6):
            conn.execute("SELECT 1")  # auto-prepared by psycopg
        def fail_in_a_psycopg_transaction() -> None:
            with conn.transaction():
                conn.execute("SELECT 1")
                raise RuntimeError  # rollback, then psycopg's DEALLOCATE ALL

        with pytest.raises(RuntimeError):
            fail_in_a_psycopg_transaction()
        rows = st.run_transaction(conn, lambda tx: tx.execute("select", {"low": 0}).rows(tuple))
        assert rows == [(1, None, None)]


def test_statements_keep_no_connection_alive(empty_db: PgDb) -> None:
    st = Statements({"one": "SELECT %(x)s::int"}, prefix="t_")
    refs = []
    for _ in range(3):
        c = psycopg.connect(empty_db.url, autocommit=True)
        assert st.execute(c, "one", {"x": 1}).first(tuple) == (1,)
        refs.append(weakref.ref(c))
        c.close()
        del c
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_the_client_encoding_is_read_per_call(conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "insert", {"id": 1, "at": None, "note": "x"})
    conn.execute("SET client_encoding TO 'LATIN1'")
    st.execute(conn, "insert", {"id": 2, "at": None, "note": "é"})
    conn.execute("SET client_encoding TO 'UTF8'")
    with empty_db.connect() as other:
        assert other.execute("SELECT note FROM t WHERE id = 2").fetchone() == ("é",)


def test_begin_travels_with_the_first_statement(conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")
    with st.transaction(conn):
        pass  # a block without statements sends nothing
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    with st.transaction(conn) as tx:
        tx.execute("insert", {"id": 1, "at": None, "note": None})  # [BEGIN; insert]
        assert conn.pgconn.transaction_status == TransactionStatus.INTRANS
        assert _count(empty_db) == 0  # not committed yet
    assert _count(empty_db) == 1

    def fail_first() -> None:
        with st.transaction(conn) as tx:
            tx.execute("insert", {"id": 1, "at": None, "note": None})  # duplicate

    with pytest.raises(errors.UniqueViolation):
        fail_first()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert conn.pgconn.pipeline_status == 0
    assert st.execute(conn, "select", {"low": 0}).rowcount == 1


def test_a_commit_whose_statement_was_deallocated_is_rolled_back_and_retried(
        conn: Any, empty_db: PgDb) -> None:
    """Our prepared COMMIT gone mid-transaction: its error aborts the transaction, which is
    rolled back and reported (never a plain COMMIT that silently rolls back);
    run_transaction runs it once more."""
    st = Statements(QUERIES, prefix="t_")

    def insert_then_wipe(tx: Any, note: str) -> None:
        tx.execute("insert", {"id": 1, "at": None, "note": note})
        if note == "first":
            conn.execute("DEALLOCATE ALL")  # inside the open transaction

    def once() -> None:
        with st.transaction(conn) as tx:
            insert_then_wipe(tx, "first")

    with pytest.raises(errors.InvalidSqlStatementName):
        once()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert _count(empty_db) == 0
    notes = iter(["first", "second"])
    st.run_transaction(conn, lambda tx: insert_then_wipe(tx, next(notes)))
    with empty_db.connect() as other:
        assert other.execute("SELECT note FROM t").fetchall() == [("second",)]


# found in review: the encoding is read per statement, and a Transaction outside its
# with block refuses without sending or marking anything
def test_the_client_encoding_is_read_per_call_inside_a_transaction(
        conn: Any, empty_db: PgDb) -> None:
    """An adapter kept from __enter__ (built for UTF8) would send 'é' as two LATIN1
    characters after a SET client_encoding inside the block."""
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "insert", {"id": 1, "at": None, "note": "x"})  # adapter has a str dumper
    with st.transaction(conn) as tx:
        conn.execute("SET client_encoding TO 'LATIN1'")  # still idle: BEGIN not sent yet
        tx.execute("insert", {"id": 2, "at": None, "note": "é"})
    conn.execute("SET client_encoding TO 'UTF8'")
    with empty_db.connect() as other:
        assert other.execute("SELECT note FROM t WHERE id = 2").fetchone() == ("é",)


def test_a_transaction_used_outside_with_never_runs_a_statement(
        conn: Any, empty_db: PgDb) -> None:
    """Each refused execute() leaves the Transaction as it was: no statement ever runs in
    autocommit outside the block."""
    st = Statements(QUERIES, prefix="t_")
    tx = st.transaction(conn)
    with pytest.raises(psycopg.ProgrammingError, match="context manager"):
        tx.execute("insert", {"id": 1, "at": None, "note": None})
    with pytest.raises(psycopg.ProgrammingError):
        tx.execute("insert", {"id": 2, "at": None, "note": None})
    assert _count(empty_db) == 0


def test_a_refused_execute_and_commit_does_not_end_a_later_block(conn: Any) -> None:
    """A refused execute_and_commit() does not mark the Transaction committed: entered
    afterwards, it still runs statements."""
    st = Statements(QUERIES, prefix="t_")
    tx = st.transaction(conn)
    with pytest.raises(psycopg.ProgrammingError, match="context manager"):
        tx.execute_and_commit("insert", {"id": 1, "at": None, "note": None})
    with tx:
        assert tx.execute("select", {"low": 0}).rowcount == 0
