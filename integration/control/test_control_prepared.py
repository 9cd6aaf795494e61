"""``db/prepared.py`` on real PostgreSQL: statements prepared per connection and run over
psycopg's libpq binding, with psycopg's adapters and psycopg's exceptions."""

from __future__ import annotations

import threading
import time
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
        with st.transaction(conn):
            st.execute(conn, "insert", {"id": 1, "at": None, "note": None})
            st.execute(conn, "insert", {"id": 1, "at": None, "note": None})

    with pytest.raises(errors.UniqueViolation):
        insert_twice()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert _count(empty_db) == 0  # the first insert was rolled back with the transaction
    st.execute(conn, "insert", {"id": 1, "at": None, "note": None})  # still usable
    assert _count(empty_db) == 1


def test_a_block_that_raises_rolls_back(conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")

    def insert_then_raise() -> None:
        with st.transaction(conn):
            st.execute(conn, "insert", {"id": 1, "at": None, "note": None})
            raise RuntimeError("fence mismatch")

    with pytest.raises(RuntimeError):
        insert_then_raise()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert _count(empty_db) == 0


def test_execute_and_commit_commits_and_ends_the_transaction(
        conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")
    with st.transaction(conn):
        st.execute(conn, "insert", {"id": 1, "at": None, "note": None})
        last = st.execute_and_commit(conn, "insert", {"id": 2, "at": None, "note": "b"})
        assert last.rowcount == 1
        assert conn.pgconn.transaction_status == TransactionStatus.IDLE
        assert _count(empty_db) == 2  # committed before the block ends
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    with pytest.raises(psycopg.ProgrammingError, match="open transaction"):
        st.execute_and_commit(conn, "insert", {"id": 3, "at": None, "note": None})
    assert _count(empty_db) == 2


def test_execute_and_commit_skips_the_commit_when_its_statement_fails(
        conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")

    def insert_then_commit_a_duplicate() -> None:
        with st.transaction(conn):
            st.execute(conn, "insert", {"id": 1, "at": None, "note": None})
            st.execute_and_commit(conn, "insert", {"id": 1, "at": None, "note": None})

    with pytest.raises(errors.UniqueViolation):
        insert_then_commit_a_duplicate()
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE
    assert conn.pgconn.pipeline_status == 0
    assert _count(empty_db) == 0  # nothing committed: the first insert is gone too
    with st.transaction(conn):
        st.execute_and_commit(conn, "insert", {"id": 1, "at": None, "note": None})
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
    # inside one the error aborts the transaction; the next call prepares again
    with pytest.raises(errors.InvalidSqlStatementName), st.transaction(conn):
        st.execute(conn, "select", {"low": 0})
    assert st.execute(conn, "select", {"low": 0}).rowcount == 1


def test_a_lock_wait_past_lock_timeout_raises_lock_not_available(
        conn: Any, empty_db: PgDb) -> None:
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "insert", {"id": 1, "at": None, "note": None})
    conn.execute("SET lock_timeout = 200")
    with empty_db.connect() as holder, holder.transaction():
        holder.execute("SELECT id FROM t WHERE id = 1 FOR UPDATE")
        with pytest.raises(errors.LockNotAvailable), st.transaction(conn):
            st.execute(conn, "lock", {"id": 1})
    assert conn.pgconn.transaction_status == TransactionStatus.IDLE


def test_a_lost_connection_raises_operational_error(conn: Any) -> None:
    st = Statements(QUERIES, prefix="t_")
    st.execute(conn, "select", {"low": 0})
    with admin() as other:
        other.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
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
    with pytest.raises(psycopg.OperationalError), st.transaction(conn):
        st.execute_and_commit(conn, "sleep", {"s": 5})
    killer.join()
    assert conn.closed
