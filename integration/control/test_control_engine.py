"""The control plane's engine (``db/engine.py``): the optional lock timeout reaches every
pooled connection, and a database error's text never carries a statement's values."""

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
