"""The retention sweeper end to end: real PostgreSQL, moto behind our fault proxy (ADR-0379
§3–§4; cases C08, C09, C10)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pg_control_db import PgDb
from sweep_world import Logged, exists, make_due, rows, seed_logs

from qinglong.control.retention.claims import ClaimOwner
from qinglong.control.retention.objects import TransactionHeldError
from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper
from qinglong.shared.errors import ValidationError

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
Config = RunAttemptLogRetentionSweeper.Config
OWNER = ClaimOwner("replica-a", "a" * 32)
FAST = Config(lease_s=30, budget_s=20, stop_budget_s=5, interval_s=0.05)

MakeSweeper = Callable[..., RunAttemptLogRetentionSweeper]


@pytest.fixture
def make_sweeper(pg_db: PgDb, s3: Any) -> Iterator[MakeSweeper]:
    engine = pg_db.engine(pool_size=2, max_overflow=0)
    made: list[RunAttemptLogRetentionSweeper] = []

    def make(bucket: str, config: Any = FAST) -> RunAttemptLogRetentionSweeper:
        sweeper = RunAttemptLogRetentionSweeper(engine, s3, OWNER, probe_bucket=bucket,
                                                config=config)
        made.append(sweeper)
        return sweeper

    try:
        yield make
    finally:
        for sweeper in made:
            sweeper.stop()
        engine.dispose()


def _tombstones(pg_db: PgDb) -> dict[str, str]:
    with pg_db.connect() as conn:
        return {str(a): o for a, o in rows(
            conn, "SELECT attempt_id, outcome FROM run_attempt_log_artifact_tombstones")}


def _controls(pg_db: PgDb) -> list[tuple[Any, ...]]:
    with pg_db.connect() as conn:
        return rows(conn, "SELECT attempt_id::text, state, failure_count, last_failure_class,"
                          " due_at > now(), claim_owner, lease_expires_at > now()"
                          " FROM run_attempt_log_retention_controls")


@pytest.mark.parametrize(("field", "value", "numbers"), [
    ("claims_per_sweep", 17, "17 outside 1..16"), ("claims_per_sweep", 0, "0 outside"),
    ("lease_s", 4.0, "4.0 s outside 5.0..300.0"), ("lease_s", 301.0, "301.0 s"),
    ("budget_s", 60.0, "60.0 s must be > 0 and below the lease of 60.0"),
    ("deletes_per_sweep", 0, "0 outside 1..1000"), ("stop_budget_s", 0.0, "0.0 s"),
    ("retry_base_s", 0.0, "0.0 s outside (0, 86400] s"),
    ("retry_base_s", 90_000.0, "90000.0 s outside"),
    ("delete_guard_s", 60.0, "60.0 s must be ≥ 0 and below the lease of 60.0"),
    ("delete_guard_s", -1.0, "-1.0 s must be ≥ 0"),
])
def test_config_is_validated_with_the_numbers(field: str, value: float, numbers: str) -> None:
    with pytest.raises(ValidationError, match=field) as err:
        RunAttemptLogRetentionSweeper(
            lambda: None, object(), OWNER, probe_bucket="b",  # type: ignore[arg-type]
            config=Config(**{field: value}))
    assert numbers in str(err.value)


def test_a_sweep_retires_versioned_and_unversioned_logs(
        pg_db: PgDb, s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any) -> None:
    plain, versioned = make_bucket(False), make_bucket(True)
    with pg_db.sa() as sa:
        logs = seed_logs(sa, direct_s3, plain, 3) + seed_logs(sa, direct_s3, versioned, 3)
    sweeper = make_sweeper(plain)
    assert sweeper.probe().status == "safe"
    result = sweeper.run_once()
    assert (result.claimed, result["deleted"]) == (6, 6), result
    assert _tombstones(pg_db) == {log.attempt_id: "deleted" for log in logs}
    assert _controls(pg_db) == []
    assert not any(exists(direct_s3, log.identity) for log in logs)
    sent = [d for d in proxy.deletes() if not d["key"].startswith(f"/{plain}/ql3-probe/")]
    assert sorted((d["version"] is None, d["if_match"] is None) for d in sent) == (
        [(False, True)] * 3 + [(True, False)] * 3)  # exact version XOR If-Match, never both
    assert sweeper.run_once().claimed == 0


@pytest.mark.parametrize("guard_s", [None, 1.0, 4.0])
def test_a_row_whose_lease_is_too_short_for_a_delete_is_left_leased(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, guard_s: float | None) -> None:
    bucket = make_bucket(False)
    with pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
    sweeper = make_sweeper(bucket, Config(lease_s=5, budget_s=4, stop_budget_s=5,
                                          delete_guard_s=guard_s))
    # default guard: the client's read timeout, at most half the lease
    assert sweeper.delete_guard_s == (2.5 if guard_s is None else guard_s)
    sweeper.probe()
    real_head = sweeper.store.head

    def slow_head(identity: Any) -> Any:  # a HEAD that eats 2 s of the 5 s lease
        time.sleep(2.0)
        return real_head(identity)

    sweeper.store.head = slow_head  # type: ignore[method-assign]
    result = sweeper.run_once()
    if guard_s == 4.0:  # about 3 s left < 4 s: no DELETE; the row stays leased
        assert dict(result.counts) == {"left_leased": 1}, result
        assert exists(direct_s3, log.identity)
        ((_, state, failures, _, _, owner, leased),) = _controls(pg_db)
        assert (state, failures, owner is not None, leased) == ("pending", 0, True, True)
    else:  # about 3 s left ≥ the guard: deleted and finalized within the lease
        assert dict(result.counts) == {"deleted": 1}, result
        assert not exists(direct_s3, log.identity)
        assert _tombstones(pg_db) == {log.attempt_id: "deleted"}


def test_failed_sweeps_back_off_up_to_five_seconds_and_reset() -> None:
    from qinglong.control.retention.objects import make_client

    client = make_client("http://127.0.0.1:9", aws_access_key_id="k",
                         aws_secret_access_key="s")  # never called here
    sweeper = RunAttemptLogRetentionSweeper(
        lambda: None, client, OWNER, probe_bucket="b",  # type: ignore[arg-type]
        config=Config(interval_s=2.0))
    assert sweeper.pause_s(0) == 2.0
    pauses = [sweeper.pause_s(n) for n in range(1, 40) for _ in range(20)]
    assert all(2.0 <= p <= 5.0 for p in pauses)
    assert max(sweeper.pause_s(12) for _ in range(200)) > 4.0  # it does grow
    slow = RunAttemptLogRetentionSweeper(
        lambda: None, client, OWNER, probe_bucket="b",  # type: ignore[arg-type]
        config=Config(interval_s=120.0))
    assert slow.pause_s(5) == 120.0  # never below the configured interval


def test_the_s3_guard_sees_the_sweepers_pooled_connection(
        make_bucket: Callable[[bool], str], make_sweeper: MakeSweeper,
        direct_s3: Any, pg_db: PgDb) -> None:
    bucket = make_bucket(False)
    with pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
    sweeper = make_sweeper(bucket)
    with sweeper._db(), pytest.raises(TransactionHeldError):
        sweeper.store.head(log.identity)
    assert not sweeper.holds_connection()


@pytest.mark.parametrize("versioned", [False, True])
def test_c09_a_lost_delete_response_settles_already_absent_exactly_once(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any, versioned: bool) -> None:
    bucket = make_bucket(versioned)
    with pg_db.connect() as conn, pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
    sweeper = make_sweeper(make_bucket(False))
    sweeper.probe()
    proxy.set(drop_delete_response=True)
    first = sweeper.run_once()
    assert first["artifact_unavailable"] == 1, first
    assert not exists(direct_s3, log.identity)  # the server did delete it
    ((_, state, failures, failure, later, owner, _),) = _controls(pg_db)
    assert (state, failures, failure, later, owner) == (
        "pending", 1, "artifact_unavailable", True, None)
    assert sweeper.run_once().claimed == 0  # not due before its retry time
    proxy.set()
    with pg_db.connect() as conn, pg_db.sa() as sa:
        make_due(conn)
    second = sweeper.run_once()
    assert (second.claimed, second["already_absent"]) == (1, 1), second
    assert sweeper.run_once().claimed == 0
    assert _tombstones(pg_db) == {log.attempt_id: "already_absent"}
    ours = [d for d in proxy.deletes() if "ql3-probe/" not in d["key"]]
    assert len(ours) == 1 and ours[0]["dropped"]  # the healing claim sent no second DELETE


def _reupload_after_head(sweeper: RunAttemptLogRetentionSweeper, client: Any, log: Logged,
                         monkeypatch: pytest.MonkeyPatch) -> list[str]:
    real_head, versions = sweeper.store.head, []

    def head(identity: Any) -> Any:
        result = real_head(identity)
        resp = client.put_object(Bucket=identity.bucket, Key=identity.key, Body=b"newer run\n",
                                 ContentType=identity.content_type,
                                 Metadata=identity.object_metadata())
        versions.append(resp.get("VersionId"))
        return result

    monkeypatch.setattr(sweeper.store, "head", head)
    return versions


def test_c10_reupload_between_head_and_delete_keeps_the_new_object_unversioned(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, monkeypatch: pytest.MonkeyPatch, proxy: Any) -> None:
    bucket = make_bucket(False)
    with pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
    sweeper = make_sweeper(bucket)
    sweeper.probe()
    _reupload_after_head(sweeper, direct_s3, log, monkeypatch)
    result = sweeper.run_once()
    assert result["artifact_integrity_mismatch"] == 1, result
    body = direct_s3.get_object(Bucket=bucket, Key=log.identity.key)["Body"].read()
    assert body == b"newer run\n"
    ((_, state, failures, failure, later, owner, _),) = _controls(pg_db)
    assert (state, failures, failure, later, owner) == (
        "pending", 1, "artifact_integrity_mismatch", True, None)
    assert _tombstones(pg_db) == {}
    assert [d["status"] for d in proxy.deletes() if d["if_match"]][-1] == 412


def test_c10_reupload_on_a_versioned_bucket_leaves_the_new_version_untouched(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, monkeypatch: pytest.MonkeyPatch) -> None:
    bucket = make_bucket(True)
    with pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
    sweeper = make_sweeper(make_bucket(False))
    sweeper.probe()
    versions = _reupload_after_head(sweeper, direct_s3, log, monkeypatch)
    result = sweeper.run_once()
    (newer,) = versions
    assert result["deleted"] == 1, result  # exactly the recorded version
    assert not exists(direct_s3, log.identity)
    body = direct_s3.get_object(Bucket=bucket, Key=log.identity.key, VersionId=newer)
    assert body["Body"].read() == b"newer run\n"


def test_c08_an_if_match_stripping_backend_leaves_unversioned_rows_alone(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any) -> None:
    plain, versioned = make_bucket(False), make_bucket(True)
    with pg_db.sa() as sa:
        (kept,) = seed_logs(sa, direct_s3, plain, 1)
        (gone,) = seed_logs(sa, direct_s3, versioned, 1)
    proxy.set(strip_if_match=True)
    sweeper = make_sweeper(plain)
    verdict = sweeper.probe()
    assert verdict.status == "unsafe" and verdict.degraded == ("object_store_unsafe",)
    result = sweeper.run_once()  # only the versioned row is claimed while unsafe
    assert (result.claimed, dict(result.counts)) == (1, {"deleted": 1}), result
    assert exists(direct_s3, kept.identity) and not exists(direct_s3, gone.identity)
    ((attempt, state, failures, failure, _, owner, _),) = _controls(pg_db)
    assert (attempt, state, failures, failure, owner) == (kept.attempt_id, "pending", 0,
                                                          None, None)  # untouched, no failure
    assert _tombstones(pg_db) == {gone.attempt_id: "deleted"}
    assert [d for d in proxy.deletes() if d["if_match"] and "ql3-probe/" not in d["key"]] == []
    proxy.set()  # the backend is fixed: the next probe says safe and the row is retired
    assert sweeper.probe().status == "safe"
    again = sweeper.run_once()
    assert (again.claimed, dict(again.counts)) == (1, {"deleted": 1}), again
    assert _tombstones(pg_db) == {gone.attempt_id: "deleted", kept.attempt_id: "deleted"}


def test_stop_drains_the_running_sweep_within_its_budget(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any) -> None:
    bucket = make_bucket(False)
    with pg_db.sa() as sa:
        logs = seed_logs(sa, direct_s3, bucket, 16)
    sweeper = make_sweeper(bucket, Config(lease_s=60, budget_s=50, stop_budget_s=3,
                                          interval_s=0.05))
    sweeper.probe()
    proxy.set(latency_ms=150)
    sweeper.start()
    sweeper.start()  # idempotent: still one thread
    deadline = time.monotonic() + 20
    while not _tombstones(pg_db) and time.monotonic() < deadline:
        time.sleep(0.05)
    began = time.monotonic()
    assert sweeper.stop() is True
    assert time.monotonic() - began < 3
    assert sweeper.stop() is True  # idempotent
    settled, controls = _tombstones(pg_db), _controls(pg_db)
    assert 0 < len(settled) < 16 and len(settled) + len(controls) == len(logs)
    for _, state, _, _, _, owner, leased in controls:  # every claimed row is still leased
        assert state == "pending" and (owner is None or leased)
    assert any(owner is not None for *_, owner, _ in controls)


def test_c09_a_replica_that_died_after_a_lost_response_is_healed_after_its_lease(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any) -> None:
    from qinglong.control.retention.claims import claim
    from qinglong.control.retention.objects import ArtifactUnavailableError
    from qinglong.control.retention.sweeper import identity_of

    bucket = make_bucket(False)
    with pg_db.connect() as conn, pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
        (dead,) = claim(sa, ClaimOwner("replica-b", "d" * 32), limit=1, lease_s=30)
    sweeper = make_sweeper(bucket)
    sweeper.probe()
    proxy.set(drop_delete_response=True)
    head = sweeper.store.head(identity_of(dead))
    with pytest.raises(ArtifactUnavailableError):
        sweeper.store.delete(identity_of(dead), head.etag)  # replica b dies here
    proxy.set()
    assert sweeper.run_once().claimed == 0  # b's lease still holds
    with pg_db.connect() as conn, pg_db.sa() as sa:
        make_due(conn)
    result = sweeper.run_once()
    assert (result.claimed, result["already_absent"]) == (1, 1), result
    assert _tombstones(pg_db) == {log.attempt_id: "already_absent"}
    assert not exists(direct_s3, log.identity)


def test_a_failed_tombstone_write_is_retirement_record_unavailable_then_healed_from_s3(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str], s3: Any) -> None:
    """The DELETE succeeded but the finalize transaction fails (here: the runtime role lost
    INSERT on tombstones): the control records ``retirement_record_unavailable`` with a
    retry time; the next claim settles it from S3 facts as ``already_absent``."""
    from qinglong.control.db.roles import apply_runtime_grants

    bucket = make_bucket(True)
    with pg_db.connect() as conn, pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
        conn.execute(f'REVOKE INSERT ON run_attempt_log_artifact_tombstones'
                     f' FROM "{pg_db.runtime_role}"')
    engine = pg_db.engine(pg_db.runtime_url, pool_size=2, max_overflow=0)
    try:
        sweeper = RunAttemptLogRetentionSweeper(engine, s3, OWNER,
                                                probe_bucket=bucket, config=FAST)
        first = sweeper.run_once()
        assert (first.claimed, first["retirement_record_unavailable"]) == (1, 1), first
        assert not exists(direct_s3, log.identity)  # deleted, but not yet recorded
        assert _tombstones(pg_db) == {}
        ((_, state, failures, failure, later, owner, _),) = _controls(pg_db)
        assert (state, failures, failure, later, owner) == (
            "pending", 1, "retirement_record_unavailable", True, None)
        with pg_db.sa() as sa, sa.begin():
            apply_runtime_grants(sa, pg_db.runtime_role)
        with pg_db.connect() as conn:
            make_due(conn)
        second = sweeper.run_once()
        assert (second.claimed, second["already_absent"]) == (1, 1), second
    finally:
        engine.dispose()
    assert _tombstones(pg_db) == {log.attempt_id: "already_absent"}
    assert _controls(pg_db) == []


def test_an_unavailable_store_claims_nothing_and_is_probed_again(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any) -> None:
    bucket = make_bucket(False)
    with pg_db.sa() as sa:
        logs = seed_logs(sa, direct_s3, bucket, 3)
    sweeper = make_sweeper(bucket, Config(lease_s=30, budget_s=20, stop_budget_s=5,
                                          probe_interval_s=0.05))
    proxy.set(fail={"PUT": 503})
    down = sweeper.run_once()
    assert (down.claimed, dict(down.counts)) == (0, {"object_store_unavailable": 1})
    assert sweeper.verdict is not None and sweeper.verdict.status == "unavailable"
    assert [c[1:6] for c in _controls(pg_db)] == [("pending", 0, None, False, None)] * 3
    proxy.set()
    time.sleep(0.1)
    up = sweeper.run_once()
    assert (up.claimed, up["deleted"], sweeper.verdict.status) == (3, 3, "safe")
    assert _tombstones(pg_db) == {log.attempt_id: "deleted" for log in logs}


def test_an_outage_mid_sweep_ends_it_after_two_rows_and_pauses_claims(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any) -> None:
    bucket = make_bucket(True)
    with pg_db.sa() as sa:
        seed_logs(sa, direct_s3, bucket, 6)
    sweeper = make_sweeper(bucket)
    assert sweeper.probe().status == "safe"
    proxy.set(fail={"HEAD": 503, "PUT": 503, "DELETE": 503})
    first = sweeper.run_once()
    assert (first.claimed, first["artifact_unavailable"], first["left_leased"]) == (6, 2, 4)
    states = sorted((failures, owner is None) for _, _, failures, _, _, owner, _
                    in _controls(pg_db))
    assert states == [(0, False)] * 4 + [(1, True)] * 2  # only two rows count a failure
    second = sweeper.run_once()  # re-probes at once: still down, so no claim
    assert (second.claimed, dict(second.counts)) == (0, {"object_store_unavailable": 1})


def test_a_recorded_null_version_id_is_an_integrity_mismatch_and_nothing_is_deleted(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper, proxy: Any) -> None:
    """``VersionId=null`` would delete whatever a suspended-versioning bucket holds under the
    key now (a re-upload included), so such a record is never trusted."""
    bucket = make_bucket(False)
    check = ("run_attempt_log_artifacts_version_id_names_a_version CHECK (version_id IS NULL"
             " OR version_id NOT IN ('', 'null')) NOT VALID")
    with pg_db.connect() as conn, pg_db.sa() as sa:
        (log,) = seed_logs(sa, direct_s3, bucket, 1)
        # a row written before migration 0004 (which refuses new ones), as the owner
        conn.execute("ALTER TABLE run_attempt_log_artifacts DROP CONSTRAINT "
                     "run_attempt_log_artifacts_version_id_names_a_version")
        for table in ("run_attempt_log_artifacts", "run_attempt_log_retention_controls"):
            conn.execute(f"UPDATE {table} SET version_id = 'null'")
        conn.execute(f"ALTER TABLE run_attempt_log_artifacts ADD CONSTRAINT {check}")
    sweeper = make_sweeper(bucket)
    result = sweeper.run_once()
    assert (result.claimed, result["artifact_integrity_mismatch"]) == (1, 1), result
    assert [d for d in proxy.deletes() if "ql3-probe/" not in d["key"]] == []
    assert exists(direct_s3, log.identity)


def test_a_stop_requested_before_the_claim_claims_nothing(
        pg_db: PgDb, direct_s3: Any, make_bucket: Callable[[bool], str],
        make_sweeper: MakeSweeper) -> None:
    bucket = make_bucket(True)
    with pg_db.sa() as sa:
        seed_logs(sa, direct_s3, bucket, 2)
    sweeper = make_sweeper(bucket)
    sweeper.request_stop()  # e.g. SIGTERM while the probe ran
    assert sweeper.run_once().claimed == 0
    assert [c[5] for c in _controls(pg_db)] == [None, None]  # nothing leased
