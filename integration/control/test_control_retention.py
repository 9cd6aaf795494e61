"""Enrollment, claims, finalize and failures of ADR-0379 against real PostgreSQL (no S3)."""

from __future__ import annotations

import json
import random
from typing import Any

import psycopg
import pytest
from pg_control_db import PgDb, seed_run

from qinglong.control.errors import FenceMismatchError
from qinglong.control.retention import finalize as fin
from qinglong.control.retention.admin import retention_retry, retention_status
from qinglong.control.retention.claims import ClaimOwner, claim, process_owner
from qinglong.control.retention.enrollment import enroll_run, enrollment_sweep
from qinglong.shared.digest import sha256_hex
from qinglong.shared.errors import ValidationError

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
A = ClaimOwner("replica-a", "1" * 32)
B = ClaimOwner("replica-b", "2" * 32)


def _controls(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute("SELECT count(*) FROM run_attempt_log_retention_controls")
               .fetchone()[0])  # type: ignore[index]


def _expire_leases(conn: psycopg.Connection[Any]) -> None:
    conn.execute("UPDATE run_attempt_log_retention_controls SET lease_expires_at ="
                 " now() - interval '1 s', due_at = now() - interval '1 s'"
                 " WHERE lease_expires_at IS NOT NULL")


def test_enrollment_in_the_terminal_transaction_sets_eligibility(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seeded = seed_run(sa, attempts=2, retention_s=7200, finished_ago_s=60)
        with pytest.raises(ValidationError):
            enroll_run(sa, seeded.run_id)  # no transaction open: refused
        with sa.begin():
            assert enroll_run(sa, seeded.run_id) == 2
            assert enroll_run(sa, seeded.run_id) == 0  # idempotent
        lag = conn.execute(
            "SELECT min(c.eligible_at - r.finished_at) FROM run_attempt_log_retention_controls c"
            " JOIN runs r ON r.id = c.run_id").fetchone()[0]  # type: ignore[index]
        assert lag.total_seconds() == 7200
        assert claim(sa, A, limit=16, lease_s=30) == []  # not eligible for two hours


@pytest.mark.parametrize("kwargs", [
    {"run_status": "lost", "attempt_status": "lost"},
    {"attempt_status": "lost"},
    {"executor": "local_process"},
    {"owner": "legacy"},
    {"run_status": "running", "attempt_status": "running"},
    {"artifacts": False},
])
def test_non_candidates_are_never_enrolled(pg_db: PgDb, kwargs: dict[str, Any]) -> None:
    with pg_db.sa() as sa:
        seeded = seed_run(sa, **kwargs)
        with sa.begin():
            assert enroll_run(sa, seeded.run_id) == 0
        assert enrollment_sweep(sa, limit=10) == 0


def test_the_enrollment_sweep_repairs_missed_rows_in_bounded_batches(pg_db: PgDb) -> None:
    with pg_db.sa() as sa:
        for _ in range(5):
            seed_run(sa)
        assert enrollment_sweep(sa, limit=3) == 3
        assert enrollment_sweep(sa, limit=3) == 2
        assert enrollment_sweep(sa, limit=3) == 0
        with pytest.raises(ValidationError):
            enrollment_sweep(sa, limit=0)


@pytest.mark.parametrize(("limit", "lease_s"), [(0, 30), (17, 30), (1, 4.9), (1, 301)])
def test_claim_bounds_are_enforced(pg_db: PgDb, limit: int, lease_s: float) -> None:
    with pg_db.sa() as sa, pytest.raises(ValidationError):
        claim(sa, A, limit=limit, lease_s=lease_s)


def test_a_leased_row_is_invisible_until_its_lease_expires(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seed_run(sa, attempts=3, enroll=True)
        first = claim(sa, A, limit=2, lease_s=30)
        assert len(first) == 2
        assert [c.attempt_id for c in claim(sa, B, limit=16, lease_s=30)] != []
        assert claim(sa, B, limit=16, lease_s=30) == []
        _expire_leases(conn)
        again = claim(sa, B, limit=16, lease_s=30)
    assert len(again) == 3
    by_id = {c.attempt_id: c for c in again}
    for old in first:
        assert by_id[old.attempt_id].version == old.version + 1
        assert by_id[old.attempt_id].token != old.token
        assert by_id[old.attempt_id].owner == str(B)


def test_process_owner_is_a_replica_plus_a_random_incarnation() -> None:
    owner = process_owner("pod-0")
    assert owner.replica_id == "pod-0" and len(owner.incarnation) == 32
    assert process_owner("pod-0") == owner
    with pytest.raises(ValidationError):
        process_owner("")


def test_finalize_writes_exact_evidence_and_deletes_the_control(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seed_run(sa, enroll=True, version_id="v-123")
        (c,) = claim(sa, A, limit=1, lease_s=30)
        tomb = fin.finalize(sa, c, fin.Outcome.DELETED)
        stored = conn.execute("SELECT outcome, evidence, evidence_sha256 FROM"
                              " run_attempt_log_artifact_tombstones").fetchall()
        assert _controls(conn) == 0
    assert stored == [("deleted", tomb.evidence, sha256_hex(tomb.evidence.encode()))]
    doc = json.loads(tomb.evidence)
    assert doc["schema"] == "qinglong/run-attempt-log-retirement@v1"
    assert (doc["attempt_id"], doc["version_id"], doc["outcome"]) == (c.attempt_id, "v-123",
                                                                      "deleted")
    assert tomb.evidence == json.dumps(doc, sort_keys=True, separators=(",", ":"))


def test_a_lease_that_ends_while_finalize_waits_for_the_lock_is_a_fence_mismatch(
        pg_db: PgDb) -> None:
    """The lock wait outlives the lease: the fence checked at the transaction's start still
    holds, but the retiring statement re-checks the lease at its own clock and writes
    nothing (no tombstone, the control stays for the next claimant)."""
    import threading
    import time

    with pg_db.connect() as conn, pg_db.sa() as sa:
        seed_run(sa, enroll=True)
        (c,) = claim(sa, A, limit=1, lease_s=5)
    errors: list[BaseException] = []
    with pg_db.connect() as blocker, blocker.transaction():
        blocker.execute("SELECT 1 FROM run_attempt_log_retention_controls WHERE attempt_id = %s"
                        " FOR UPDATE", (c.attempt_id,))

        def finalize_now() -> None:
            with pg_db.sa() as sa:
                try:
                    fin.finalize(sa, c, fin.Outcome.DELETED)
                except BaseException as exc:
                    errors.append(exc)

        worker = threading.Thread(target=finalize_now)
        worker.start()
        time.sleep(0.3)  # finalize has begun and waits for the row lock
        assert worker.is_alive()
        while blocker.execute("SELECT lease_expires_at > clock_timestamp() FROM"
                              " run_attempt_log_retention_controls").fetchone() == (True,):
            time.sleep(0.1)
    worker.join(10)
    assert [type(e) for e in errors] == [FenceMismatchError] and "lease expired" in str(errors[0])
    with pg_db.connect() as conn, pg_db.sa() as sa:
        assert _controls(conn) == 1
        assert conn.execute("SELECT count(*) FROM run_attempt_log_artifact_tombstones"
                            ).fetchone() == (0,)


def test_a_fence_mismatch_changes_nothing(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seed_run(sa, enroll=True)
        (stale,) = claim(sa, A, limit=1, lease_s=30)
        _expire_leases(conn)
        with pytest.raises(FenceMismatchError, match="lease expired"):
            fin.finalize(sa, stale, fin.Outcome.DELETED)
        (fresh,) = claim(sa, B, limit=1, lease_s=30)
        with pytest.raises(FenceMismatchError, match="owner, token or version"):
            fin.finalize(sa, stale, fin.Outcome.DELETED)
        assert fin.record_failure(sa, stale, fin.FailureClass.ARTIFACT_UNAVAILABLE) is None
        assert _controls(conn) == 1
        fin.finalize(sa, fresh, fin.Outcome.ALREADY_ABSENT)  # the next claimant settles it
        with pytest.raises(FenceMismatchError, match="gone"):
            fin.finalize(sa, fresh, fin.Outcome.ALREADY_ABSENT)
        assert conn.execute("SELECT outcome FROM run_attempt_log_artifact_tombstones"
                            ).fetchall() == [("already_absent",)]


def test_a_changed_artifact_identity_goes_manual_instead_of_being_claimed(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seed_run(sa, attempts=2, enroll=True)
        conn.execute("UPDATE run_attempt_log_artifacts SET sha256 = repeat('f', 64)"
                     " WHERE id = (SELECT min(id) FROM run_attempt_log_artifacts)")
        claims = claim(sa, A, limit=16, lease_s=30)
        status = retention_status(sa)
    assert len(claims) == 1
    assert status["controls"]["manual"] == 1
    assert status["manual"][0]["last_failure_class"] == "artifact_integrity_mismatch"


def test_failures_back_off_then_go_manual_and_retry_resets(pg_db: PgDb) -> None:
    rng = random.Random(7)
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seeded = seed_run(sa, enroll=True)
        states = []
        for _ in range(3):
            _make_due(conn)
            (c,) = claim(sa, A, limit=1, lease_s=30)
            rec = fin.record_failure(sa, c, fin.FailureClass.ARTIFACT_UNAVAILABLE,
                                     manual_after=3, rng=rng)
            assert rec is not None
            states.append((rec.state, rec.failure_count))
        _make_due(conn)
        assert claim(sa, A, limit=1, lease_s=30) == []  # manual rows are never claimed
        assert retention_retry(sa, [seeded.attempt_ids[0]]) == seeded.attempt_ids
        assert len(claim(sa, A, limit=1, lease_s=30)) == 1
    assert states == [("pending", 1), ("pending", 2), ("manual", 3)]


def test_the_retry_delay_is_capped_at_24_hours(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seed_run(sa, enroll=True)
        conn.execute("UPDATE run_attempt_log_retention_controls SET failure_count = 1000")
        (c,) = claim(sa, A, limit=1, lease_s=30)
        rec = fin.record_failure(sa, c, fin.FailureClass.OBJECT_STORE_UNSAFE,
                                 manual_after=10_000)
        delay = conn.execute("SELECT due_at - now() FROM run_attempt_log_retention_controls"
                             ).fetchone()[0]  # type: ignore[index]
    assert rec is not None and rec.state == "pending"
    assert 0 < delay.total_seconds() <= 86_400


def _make_due(conn: psycopg.Connection[Any]) -> None:
    conn.execute("UPDATE run_attempt_log_retention_controls SET due_at = now()"
                 " WHERE state = 'pending'")


def test_retry_only_touches_failed_rows_and_never_before_eligibility(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        fresh = seed_run(sa, enroll=True)  # pending, never failed
        later = seed_run(sa, enroll=True, retention_s=7200)  # eligible in about an hour
        conn.execute("UPDATE run_attempt_log_retention_controls SET state = 'manual',"
                     " failure_count = 8 WHERE attempt_id = %s", (later.attempt_ids[0],))
        assert retention_retry(sa, [fresh.attempt_ids[0]]) == []
        assert retention_retry(sa, [later.attempt_ids[0]]) == later.attempt_ids
        row = conn.execute("SELECT state, failure_count, due_at = eligible_at,"
                           " due_at > now() FROM run_attempt_log_retention_controls"
                           " WHERE attempt_id = %s", (later.attempt_ids[0],)).fetchone()
        assert row == ("pending", 0, True, True)
        (only,) = claim(sa, A, limit=16, lease_s=30)  # the retried row is not due yet
        assert only.attempt_id == fresh.attempt_ids[0]


def test_record_failure_after_the_lease_ended_changes_nothing(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seed_run(sa, enroll=True)
        (c,) = claim(sa, A, limit=1, lease_s=30)
        conn.execute("UPDATE run_attempt_log_retention_controls"
                     " SET lease_expires_at = now() - interval '1 s'")
        assert fin.record_failure(sa, c, fin.FailureClass.ARTIFACT_UNAVAILABLE) is None
        row = conn.execute("SELECT failure_count, claim_owner FROM"
                           " run_attempt_log_retention_controls").fetchone()
    assert row == (0, str(A))


def test_a_retention_raised_after_enrollment_postpones_the_claim(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seeded = seed_run(sa, enroll=True, retention_s=0)  # eligible an hour ago
        conn.execute("UPDATE tasks SET log_retention_s = 7200")  # now: in about an hour
        assert claim(sa, A, limit=16, lease_s=30) == []
        row = conn.execute(
            "SELECT state, claim_owner, lease_expires_at, due_at = eligible_at,"
            " eligible_at - now() BETWEEN interval '59 min' AND interval '61 min'"
            " FROM run_attempt_log_retention_controls").fetchone()
        assert row == ("pending", None, None, True, True)
        conn.execute("UPDATE tasks SET log_retention_s = 0")
        conn.execute("UPDATE run_attempt_log_retention_controls SET due_at = now(),"
                     " eligible_at = now()")
        (c,) = claim(sa, A, limit=16, lease_s=30)
    assert c.attempt_id == seeded.attempt_ids[0]


@pytest.mark.parametrize("version_id", ["null", ""])
def test_a_version_id_that_names_no_version_is_refused(pg_db: PgDb, version_id: str) -> None:
    """Migration 0004: S3's literal "null" VersionId (or an empty one) is not an identity."""
    with pg_db.connect() as conn, pg_db.sa() as sa:
        seeded = seed_run(sa)
        with pytest.raises(psycopg.errors.CheckViolation, match="names_a_version"):
            conn.execute("UPDATE run_attempt_log_artifacts SET version_id = %s"
                         " WHERE attempt_id = %s", (version_id, seeded.attempt_ids[0]))
        conn.execute("UPDATE run_attempt_log_artifacts SET version_id = 'v-3'"
                     " WHERE attempt_id = %s", (seeded.attempt_ids[0],))
