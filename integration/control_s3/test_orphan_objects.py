"""Orphan log objects are collected exactly once, never a concurrent re-upload
(docs/operations.md "Orphan log objects"; ``history/orphans.py``).

Real PostgreSQL and moto's server over HTTP behind ``fault_proxy.py``. The object is PUT as a
worker's presigned upload writes it (key and identity metadata from ``log_upload.log_identity``)
for an attempt whose lease then ended without a completion (``lost``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from pg_control_db import PgDb

from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.log_upload import log_identity
from qinglong.control.history.orphans import orphan_margin_s, sweep_orphans
from qinglong.control.retention.objects import S3ObjectStore
from qinglong.control.retention.probe import ProbeVerdict
from qinglong.shared.ids import uuid7
from qinglong.shared.wire import LogFacts

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
SAFE = ProbeVerdict("safe", "test: honours If-Match", "-", True)
PROJECT = "00000000-0000-7000-8000-0000000000aa"
BODY = "日志 第一行\n".encode() * 100


def _attempt(db: PgDb, *, status: str = "lost", artifact: bool = False,
             ended_ago_s: int = 7200) -> tuple[str, str]:
    task, run, attempt = uuid7(), uuid7(), uuid7()
    with db.connect() as conn:
        conn.execute("INSERT INTO tasks (id, project_id, name, log_retention_s)"
                     " VALUES (%s, %s, %s, 0)", (task, PROJECT, "备份-" + task[-6:]))
        conn.execute("INSERT INTO runs (id, project_id, task_id, owner, status, finished_at)"
                     " VALUES (%s, %s, %s, 'runtime', %s, now())",
                     (run, PROJECT, task, "lost" if status == "lost" else "succeeded"))
        conn.execute("INSERT INTO attempts (id, run_id, number, executor, status, finished_at,"
                     " lease_expires_at) VALUES (%s, %s, 1, 'remote_worker', %s,"
                     " now() - make_interval(secs => %s), now() - make_interval(secs => %s))",
                     (attempt, run, status, ended_ago_s, ended_ago_s))
        if artifact:
            conn.execute("INSERT INTO run_attempt_log_artifacts (id, attempt_id, project_id,"
                         " run_id, bucket, object_key, size_bytes, sha256, content_type,"
                         " metadata) VALUES (%s, %s, %s, %s, 'b', %s, 1, repeat('a', 64),"
                         " 'text/plain', '{}')",
                         (f"wlog-{attempt}", attempt, PROJECT, run,
                          f"p/{PROJECT}/wlog-{attempt}"))
    return run, attempt


def _put(s3: Any, bucket: str, run: str, attempt: str, body: bytes = BODY) -> str:
    """PUT as the worker's presigned upload does; returns the key."""
    facts = LogFacts(size_bytes=len(body), sha256=hashlib.sha256(body).hexdigest(),
                     content_type="text/plain; charset=utf-8")
    ident = log_identity(bucket=bucket, project_id=PROJECT, run_id=run, attempt_id=attempt,
                         facts=facts)
    s3.put_object(Bucket=bucket, Key=ident.key, Body=body, ContentType=ident.content_type,
                  Metadata=ident.object_metadata())
    return ident.key


def _evidence(db: PgDb) -> list[tuple[str, str]]:
    with db.connect() as conn:
        return [(str(a), o) for a, o in conn.execute(
            "SELECT attempt_id, outcome FROM orphan_log_objects ORDER BY attempt_id")]


def _exists(s3: Any, bucket: str, key: str) -> bool:
    return bool(s3.list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount"))


@pytest.mark.parametrize("versioned", [False, True])
def test_an_orphan_is_collected_exactly_once(pg_db: PgDb, s3: Any, direct_s3: Any,
                                             proxy: Any,
                                             make_bucket: Callable[[bool], str],
                                             versioned: bool) -> None:
    bucket = make_bucket(versioned)
    run, lost = _attempt(pg_db)
    orphan = _put(direct_s3, bucket, run, lost)
    run2, recorded = _attempt(pg_db, status="succeeded", artifact=True)
    named = _put(direct_s3, bucket, run2, recorded)  # an artifact row names it: never touched
    run3, recent = _attempt(pg_db, ended_ago_s=10)  # inside the margin: not yet
    young = _put(direct_s3, bucket, run3, recent)
    store = S3ObjectStore(s3, in_transaction=lambda: False, verdict=SAFE)
    with pg_db.pooled(pg_db.runtime_url) as engine:
        first = sweep_orphans(engine, store, s3, bucket, "replica-一/1", margin_s=600)
        second = sweep_orphans(engine, store, s3, bucket, "replica-二/2", margin_s=600)
    assert first.leased and first.outcomes == {"deleted": 1} and first.stopped is None
    assert second.leased and second.walked == 0 and not second.outcomes
    assert not _exists(direct_s3, bucket, orphan)
    if versioned:  # the exact version seen was deleted, not hidden behind a marker
        versions = direct_s3.list_object_versions(Bucket=bucket, Prefix=orphan)
        assert not versions.get("Versions") and not versions.get("DeleteMarkers")
    assert _exists(direct_s3, bucket, named) and _exists(direct_s3, bucket, young)
    assert [d for d in proxy.deletes() if orphan in str(d)] and len(proxy.deletes()) == 1
    assert _evidence(pg_db) == [(lost, "deleted")]


class _ReuploadAfterHead:
    """A client whose HEAD is followed by a re-upload of the same key (other bytes): the
    window between the sweep's HEAD and its DELETE."""

    def __init__(self, client: Any, direct: Any, bucket: str, run: str, attempt: str) -> None:
        self._client, self._direct = client, direct
        self._bucket, self._run, self._attempt = bucket, run, attempt

    def head_object(self, **kwargs: Any) -> Any:
        resp = self._client.head_object(**kwargs)
        _put(self._direct, self._bucket, self._run, self._attempt, b"re-uploaded\n")
        return resp

    def head_bucket(self, **kwargs: Any) -> Any:
        return self._client.head_bucket(**kwargs)


@pytest.mark.parametrize("versioned", [False, True])
def test_a_concurrent_reupload_is_never_deleted(pg_db: PgDb, s3: Any, direct_s3: Any,
                                                make_bucket: Callable[[bool], str],
                                                versioned: bool) -> None:
    bucket = make_bucket(versioned)
    run, lost = _attempt(pg_db)
    key = _put(direct_s3, bucket, run, lost)
    store = S3ObjectStore(s3, in_transaction=lambda: False, verdict=SAFE)
    racing = _ReuploadAfterHead(s3, direct_s3, bucket, run, lost)
    with pg_db.pooled(pg_db.runtime_url) as engine:
        sweep = sweep_orphans(engine, store, racing, bucket, "replica-一/1", margin_s=600)
    body = direct_s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == b"re-uploaded\n"
    # unversioned: If-Match on the ETag seen fails (412) and nothing is deleted; versioned:
    # only the version seen is deleted, the re-upload is the current version
    assert sweep.outcomes == ({"deleted": 1} if versioned else {"changed": 1})


def test_a_lost_delete_answer_is_healed_by_the_next_sweep(pg_db: PgDb, s3: Any,
                                                          direct_s3: Any, proxy: Any,
                                                          make_bucket: Callable[[bool], str],
                                                          ) -> None:
    bucket = make_bucket(False)
    run, lost = _attempt(pg_db)
    key = _put(direct_s3, bucket, run, lost)
    store = S3ObjectStore(s3, in_transaction=lambda: False, verdict=SAFE)
    proxy.set(drop_delete_response=True)
    with pg_db.pooled(pg_db.runtime_url) as engine:
        first = sweep_orphans(engine, store, s3, bucket, "replica-一/1", margin_s=600)
        assert first.stopped is not None and not first.outcomes
        assert not _exists(direct_s3, bucket, key)  # the delete happened, its answer was lost
        assert _evidence(pg_db) == []
        proxy.set()
        second = sweep_orphans(engine, store, s3, bucket, "replica-一/1", margin_s=600)
    assert second.outcomes == {"absent": 1}
    assert _evidence(pg_db) == [(lost, "absent")]


def test_the_margin_outlasts_the_upload_url_so_a_late_put_is_not_swept(
        pg_db: PgDb, s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    """With presigned log PUTs valid 7 days, an attempt that ended 2 hours ago (past the old
    fixed hour) may still receive its log: the derived margin keeps it; one that ended 8
    days ago (past the URL's lifetime plus the lease) is swept."""
    dispatch = DispatchConfig(lease_ms=60_000, heartbeat_ms=20_000, upload_url_ttl_s=604_800)
    margin = orphan_margin_s(dispatch)
    assert margin >= 604_800 + 60
    assert orphan_margin_s(DispatchConfig()) == 3600.0  # the default URL: the hour floor
    bucket = make_bucket(False)
    run, recent = _attempt(pg_db, ended_ago_s=7200)
    late = _put(direct_s3, bucket, run, recent)
    run2, old = _attempt(pg_db, ended_ago_s=8 * 86_400)
    gone = _put(direct_s3, bucket, run2, old)
    store = S3ObjectStore(s3, in_transaction=lambda: False, verdict=SAFE)
    with pg_db.pooled(pg_db.runtime_url) as engine:
        sweep = sweep_orphans(engine, store, s3, bucket, "replica-一/1", margin_s=margin)
    assert sweep.walked == 1 and sweep.outcomes == {"deleted": 1}
    assert _exists(direct_s3, bucket, late) and not _exists(direct_s3, bucket, gone)
    assert _evidence(pg_db) == [(old, "deleted")]
