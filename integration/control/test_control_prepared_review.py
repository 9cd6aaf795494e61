"""db/prepared.py edge cases found in review: the client encoding is read per statement even
inside a transaction, and a Transaction used outside its ``with`` block refuses without
sending or marking anything."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pg_control_db import PgDb

from qinglong.control.db.pool import connect
from qinglong.control.db.prepared import Statements

QUERIES = {
    "insert": "INSERT INTO t (id, at, note) VALUES (%(id)s, %(at)s, %(note)s)",
    "select": "SELECT id, at, note FROM t WHERE id >= %(low)s ORDER BY id",
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
