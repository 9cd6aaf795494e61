"""Reading a log against retention: 200 / 404 / 410 / 503 and fail-closed tombstones (ADR-0379
§5; docs/protocols.md §4.4). Real PostgreSQL, moto behind our fault proxy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pg_control_db import PgDb
from sweep_world import Logged, seed_logs

from qinglong.control.retention.claims import ClaimOwner
from qinglong.control.retention.objects import ArtifactIdentity, TransactionHeldError
from qinglong.control.retention.read_path import (
    ConnectionGate,
    S3LogReader,
    TombstoneIntegrityError,
    read_attempt_log,
)
from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
OWNER = ClaimOwner("replica-r", "b" * 32)


class World:
    def __init__(self, pg_db: PgDb, s3: Any, direct_s3: Any, bucket: str) -> None:
        self.engine = pg_db.engine(pool_size=2, max_overflow=0)
        self.gate = ConnectionGate(self.engine)
        self.reader = S3LogReader(s3, in_transaction=self.gate.held)
        self.sweeper = RunAttemptLogRetentionSweeper(self.engine, s3, OWNER,
                                                     probe_bucket=bucket)
        self.sweeper.probe()
        self.pg_db, self.direct_s3, self.bucket = pg_db, direct_s3, bucket

    def seed(self, n: int = 1) -> list[Logged]:
        with self.pg_db.sa() as sa:
            return seed_logs(sa, self.direct_s3, self.bucket, n)


@pytest.fixture(params=[False, True], ids=["unversioned", "versioned"])
def world(request: pytest.FixtureRequest, pg_db: PgDb, s3: Any, direct_s3: Any,
          make_bucket: Callable[[bool], str]) -> Iterator[World]:
    w = World(pg_db, s3, direct_s3, make_bucket(request.param))
    try:
        yield w
    finally:
        w.engine.dispose()


def test_present_log_is_200_then_410_after_retirement(world: World) -> None:
    (log,) = world.seed()
    ok = read_attempt_log(world.gate, world.reader, log.attempt_id)
    assert (ok.status, ok.body) == (200, log.body)
    assert world.sweeper.run_once()["deleted"] == 1
    gone = read_attempt_log(world.gate, world.reader, log.attempt_id)
    assert (gone.status, gone.outcome, gone.body) == (410, "deleted", None)
    assert gone.retired_at is not None


def test_unknown_attempt_is_404(world: World) -> None:
    assert read_attempt_log(world.gate, world.reader, uuid7()).status == 404


def test_missing_without_tombstone_is_503_never_a_fake_retired(world: World) -> None:
    (log,) = world.seed()
    kwargs: dict[str, Any] = {"Bucket": log.identity.bucket, "Key": log.identity.key}
    if log.identity.version_id:
        kwargs["VersionId"] = log.identity.version_id
    world.direct_s3.delete_object(**kwargs)  # lost out of band: no tombstone
    result = read_attempt_log(world.gate, world.reader, log.attempt_id)
    assert (result.status, result.outcome) == (503, None)
    assert "not retired" in result.reason


def test_an_unreachable_store_is_503(world: World, proxy: Any) -> None:
    (log,) = world.seed()
    proxy.set(fail={"HEAD": 503, "GET": 503})
    result = read_attempt_log(world.gate, world.reader, log.attempt_id)
    assert result.status == 503 and "unavailable" in result.reason


def test_missing_then_retired_meanwhile_is_410(world: World) -> None:
    (log,) = world.seed()

    class RetiresDuringRead:
        def get(self, identity: ArtifactIdentity) -> bytes | None:
            assert world.sweeper.run_once()["deleted"] == 1  # a replica retires it now
            return world.reader.get(identity)

    result = read_attempt_log(world.gate, RetiresDuringRead(), log.attempt_id)
    assert (result.status, result.outcome) == (410, "deleted")


@pytest.mark.parametrize("tamper", [
    "UPDATE run_attempt_log_artifact_tombstones SET evidence = replace(evidence,"
    " '\"outcome\":\"deleted\"', '\"outcome\":\"already_absent\"')",
    "UPDATE run_attempt_log_artifact_tombstones SET outcome = 'already_absent'",
    "UPDATE run_attempt_log_artifact_tombstones SET retired_at = retired_at + interval '1 s'",
    "UPDATE run_attempt_log_artifacts SET sha256 = repeat('0', 64)",
    # rewritten evidence whose digest was recomputed: an extra field, then non-canonical bytes
    "UPDATE run_attempt_log_artifact_tombstones SET evidence = replace(evidence, '{',"
    " '{\"note\":\"x\",'), evidence_sha256 = encode(sha256(convert_to(replace(evidence, '{',"
    " '{\"note\":\"x\",'), 'UTF8')), 'hex')",
    "UPDATE run_attempt_log_artifact_tombstones SET evidence = replace(evidence, ',', ', '),"
    " evidence_sha256 = encode(sha256(convert_to(replace(evidence, ',', ', '), 'UTF8')), 'hex')",
], ids=["evidence", "outcome", "retired_at", "artifact", "extra-field", "non-canonical"])
def test_a_tampered_tombstone_fails_closed(world: World, tamper: str) -> None:
    (log,) = world.seed()
    world.sweeper.run_once()
    with world.pg_db.connect() as conn:  # the owner role: the runtime role cannot UPDATE
        conn.execute(tamper)
    with pytest.raises(TombstoneIntegrityError):
        read_attempt_log(world.gate, world.reader, log.attempt_id)


def test_the_reader_refuses_s3_while_a_connection_is_held(world: World) -> None:
    (log,) = world.seed()
    with world.gate.connection(), pytest.raises(TransactionHeldError):
        world.reader.get(log.identity)
