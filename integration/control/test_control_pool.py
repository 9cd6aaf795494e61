"""Pooled control connections: the optional lock timeout (``db/pool.py``)."""

from __future__ import annotations

import psycopg
import pytest
from pg_control_db import PgDb, seed_run

from qinglong.control.db.pool import open_pool
from qinglong.control.retention.claims import ClaimOwner, claim

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_a_claim_blocked_by_a_table_lock_gives_up_after_the_lock_timeout(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        seed_run(conn, enroll=True)
    pool = open_pool(pg_db.url, min_size=1, max_size=1, lock_timeout_ms=300)
    try:
        with pg_db.connect() as blocker, blocker.transaction():
            blocker.execute("LOCK TABLE run_attempt_log_retention_controls"
                            " IN ACCESS EXCLUSIVE MODE")
            # LockNotAvailable is raised only by lock_timeout (without it the claim would wait)
            with pool.connection() as conn, pytest.raises(psycopg.errors.LockNotAvailable):
                claim(conn, ClaimOwner("r", "0" * 32), limit=16, lease_s=30)
        with pool.connection() as conn:  # the lock is gone: the same pool claims the row
            assert len(claim(conn, ClaimOwner("r", "0" * 32), limit=16, lease_s=30)) == 1
    finally:
        pool.close()
