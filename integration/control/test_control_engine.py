"""The control plane's engine (``db/engine.py``): the optional lock timeout reaches every
pooled connection, a database error's text never carries a statement's values, and a
connection broken while pooled is replaced before any statement, never after one."""

from __future__ import annotations

import psycopg
import pytest
from pg_control_db import PgDb, seed_run
from sqlalchemy.exc import DBAPIError

from qinglong.control.db.engine import run_named
from qinglong.control.retention.claims import ClaimOwner, claim

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_a_claim_blocked_by_a_table_lock_gives_up_after_the_lock_timeout(pg_db: PgDb) -> None:
    with pg_db.sa() as conn:
        seed_run(conn, enroll=True)
    engine = pg_db.engine(pool_size=1, max_overflow=0, lock_timeout_ms=300)
    try:
        with pg_db.connect() as blocker, blocker.transaction():
            blocker.execute("LOCK TABLE run_attempt_log_retention_controls"
                            " IN ACCESS EXCLUSIVE MODE")
            # LockNotAvailable is raised only by lock_timeout (without it the claim would wait)
            with engine.connect() as conn, pytest.raises(DBAPIError) as caught:
                claim(conn, ClaimOwner("r", "0" * 32), limit=16, lease_s=30)
            assert isinstance(caught.value.orig, psycopg.errors.LockNotAvailable)
        with engine.connect() as conn:  # the lock is gone: the same pool claims the row
            assert len(claim(conn, ClaimOwner("r", "0" * 32), limit=16, lease_s=30)) == 1
    finally:
        engine.dispose()


def test_a_failed_statement_names_no_parameter_value(pg_db: PgDb) -> None:
    engine = pg_db.engine()
    try:
        with engine.connect() as conn, pytest.raises(DBAPIError) as caught:
            run_named(conn, "SELECT %(secret)s::text, 1 / 0", {"secret": "hunter2"})
        assert "division by zero" in str(caught.value)  # the server's reason stays
        assert "hunter2" not in str(caught.value)  # SQLAlchemy would print it otherwise
    finally:
        engine.dispose()


def _terminate(pg_db: PgDb, pid: int) -> None:
    """End backend ``pid`` and wait until it has left ``pg_stat_activity``."""
    with pg_db.connect() as admin:
        admin.autocommit = True
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(600):
            if admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                             (pid,)).fetchone() == (0,):
                return
            admin.execute("SELECT pg_sleep(0.05)")
    raise AssertionError(f"backend {pid} did not end")


def test_a_pooled_connection_ended_while_idle_is_replaced_before_the_first_statement(
        pg_db: PgDb) -> None:
    """No ping per checkout: the BEGIN sent as the pool hands the connection out finds it
    broken, and the pool begins again on a fresh one; the caller sees no error."""
    engine = pg_db.engine(pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            first = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
        _terminate(pg_db, first)
        with engine.begin() as conn:
            again = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            # the transaction began at checkout, at the pool's isolation level
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar_one() == \
                "read committed"
        assert again != first
    finally:
        engine.dispose()


def test_a_connection_lost_after_the_first_statement_is_not_retried(pg_db: PgDb) -> None:
    """Once a statement of the transaction was sent, a lost connection is the caller's
    error (the API answers 503): the statement is not sent again on another connection."""
    engine = pg_db.engine(pool_size=1, max_overflow=0)
    try:
        with engine.begin() as conn:
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            _terminate(pg_db, pid)
            with pytest.raises(DBAPIError) as caught:
                conn.exec_driver_sql("SELECT 1")
            conn.rollback()
        assert isinstance(caught.value.orig, psycopg.OperationalError)
        assert caught.value.connection_invalidated
        with engine.begin() as conn:  # the pool goes on with a fresh connection
            assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one() != pid
    finally:
        engine.dispose()


def test_a_transaction_at_another_isolation_level_still_begins(pg_db: PgDb) -> None:
    """``execution_options(isolation_level=…)`` on a connection the pool has begun: the
    empty transaction is ended and the next one runs at the level asked for."""
    engine = pg_db.engine(pool_size=1, max_overflow=0)
    try:
        with engine.connect() as plain:
            conn = plain.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                assert conn.exec_driver_sql("SHOW transaction_isolation").scalar_one() == \
                    "repeatable read"
        with engine.connect() as conn:
            assert conn.exec_driver_sql("SHOW transaction_isolation").scalar_one() == \
                "read committed"
    finally:
        engine.dispose()
