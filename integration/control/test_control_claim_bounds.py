"""A claim never returns more than its limit: 100k rows, no statistics, concurrent claimers."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_control_db import PgDb, seed_bulk, seed_run

from qinglong.control.retention import finalize as fin
from qinglong.control.retention.claims import ClaimOwner, claim

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")
TABLES = ("tasks", "runs", "attempts", "run_attempt_log_artifacts",
          "run_attempt_log_retention_controls")


def _bumped(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute("SELECT count(*) FROM run_attempt_log_retention_controls"
                            " WHERE claim_version > 0").fetchone()[0])  # type: ignore[index]


def test_claims_never_exceed_their_limit_on_100k_rows_without_statistics(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        for table in TABLES:  # docs/protocols.md §4.3: the planner must not know the row counts
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
        seed_bulk(conn, 100_000)
        never_analyzed = conn.execute(
            "SELECT bool_and(last_analyze IS NULL AND last_autoanalyze IS NULL)"
            " FROM pg_stat_user_tables WHERE relname = ANY(%s)", (list(TABLES),)
        ).fetchone()[0]  # type: ignore[index]
        assert never_analyzed
        total = 0
        for limit in (1, 7, 16):
            got = claim(sa, ClaimOwner("r", "x" * 32), limit=limit, lease_s=60)
            total += limit
            assert len(got) == limit
            assert _bumped(conn) == total


def test_concurrent_claimers_split_rows_without_overlap(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        seed_bulk(conn, 2_000)
    seen: list[list[str]] = []
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with pg_db.sa() as sa:
                owner = ClaimOwner(f"replica-{n}", f"{n:032x}")
                for _ in range(10):
                    batch = claim(sa, owner, limit=16, lease_s=60)
                    assert len(batch) <= 16
                    seen.append([c.attempt_id for c in batch])
                    for c in batch[::2]:
                        fin.finalize(sa, c, fin.Outcome.DELETED)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    ids = [a for batch in seen for a in batch]
    assert len(ids) == len(set(ids)) == 640


def test_cli_retention_status_and_retry(pg_db: PgDb) -> None:
    with pg_db.sa() as sa:
        seeded = seed_run(sa, enroll=True)
        (c,) = claim(sa, ClaimOwner("r", "y" * 32), limit=1, lease_s=30)
        fin.record_failure(sa, c, fin.FailureClass.ARTIFACT_INTEGRITY_MISMATCH, manual_after=1)
    base = [QL3, "control", "retention"]
    url = ["--database-url", pg_db.url]
    out = subprocess.run([*base, "status", *url, "--json"], capture_output=True, text=True,
                         timeout=60, check=True)
    status = json.loads(out.stdout)
    assert status["controls"]["manual"] == 1
    assert status["manual"][0]["attempt_id"] == seeded.attempt_ids[0]
    ok = subprocess.run([*base, "retry", *url, seeded.attempt_ids[0]], capture_output=True,
                        text=True, timeout=60, check=False)
    assert (ok.returncode, ok.stdout.strip()) == (0, seeded.attempt_ids[0])
    missing = "01890000-0000-7000-8000-000000000000"
    bad = subprocess.run([*base, "retry", *url, missing], capture_output=True, text=True,
                         timeout=60, check=False)
    assert bad.returncode == 1 and missing in bad.stderr
    with pg_db.sa() as sa:  # manual again, then retried beside an unknown id, as JSON
        (c,) = claim(sa, ClaimOwner("r", "y" * 32), limit=1, lease_s=30)
        fin.record_failure(sa, c, fin.FailureClass.ARTIFACT_INTEGRITY_MISMATCH, manual_after=1)
    both = subprocess.run([*base, "retry", *url, "--json", seeded.attempt_ids[0], missing,
                           missing.upper()],  # the same id twice: listed once
                          capture_output=True, text=True, timeout=60, check=False)
    assert both.returncode == 1 and missing in both.stderr
    assert json.loads(both.stdout) == {"retried": [seeded.attempt_ids[0]],
                                       "not_retried": [missing]}
