"""Log upload through a presigned PUT, completion's HEAD check and enrollment, and the worker
routes over HTTP (docs/protocols.md §4.2 logs, §4.3 enrollment, §4.5). Real PostgreSQL as the
runtime role, moto's server over real HTTP."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from dispatch_world import PROJECT, World, registration, runtime_engine
from pg_control_db import PgDb

from qinglong.control.dispatch.claims import claim_attempts
from qinglong.control.dispatch.completion import complete_attempt
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import LogMismatchError
from qinglong.control.dispatch.log_upload import grant_log_upload
from qinglong.control.dispatch.workers import register_incarnation
from qinglong.shared.wire import ClaimRequest, CompletionReport, LogFacts, LogUploadRequest

pytestmark = [pytest.mark.integration, pytest.mark.postgres,
              # starlette's TestClient prefers the httpx2 package; httpx is what is installed
              pytest.mark.filterwarnings("ignore:.*httpx2")]
CONFIG = DispatchConfig()
BODY = b"line one\nline two\n"


@pytest.fixture
def engine(pg_db: PgDb) -> Iterator[Any]:
    eng = runtime_engine(pg_db)
    try:
        yield eng
    finally:
        eng.dispose()


def _leased(world: World, engine: Any) -> tuple[str, Any]:
    pool = world.pool()
    world.runs(world.task(retention_s=60))
    inc = register_incarnation(engine, CONFIG, pool_id=pool, pool_labels={},
                               registration=registration()).incarnation_id
    [attempt] = claim_attempts(engine, CONFIG, pool_id=pool,
                               request=ClaimRequest(inc, 1)).attempts
    return pool, attempt


def _facts(body: bytes) -> LogFacts:
    return LogFacts(sha256=hashlib.sha256(body).hexdigest(), size_bytes=len(body))


def test_upload_through_the_presigned_url_then_complete_records_and_enrolls(
        pg_db: PgDb, engine: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    world, bucket = World(pg_db), make_bucket(True)
    pool, attempt = _leased(world, engine)
    grant = grant_log_upload(engine, CONFIG, s3=direct_s3, bucket=bucket, pool_id=pool,
                             request=LogUploadRequest(attempt.lease, _facts(BODY)))
    assert grant.object_key == f"p/{PROJECT}/wlog-{attempt.lease.attempt_id}"
    put = httpx.put(grant.url, headers=grant.headers, content=BODY, timeout=10)
    assert put.status_code == 200, put.text
    ack = complete_attempt(engine, s3=direct_s3, bucket=bucket, pool_id=pool,
                           report=CompletionReport(attempt.lease, "succeeded", 0, None,
                                                   _facts(BODY)))
    assert ack.replayed is False
    head = direct_s3.head_object(Bucket=bucket, Key=grant.object_key)
    art_version, size, meta, etag = world.one(
        "SELECT version_id, size_bytes, metadata, etag FROM run_attempt_log_artifacts")
    assert art_version == head["VersionId"] and size == len(BODY) and etag == head["ETag"]
    assert meta["artifact"] == f"wlog-{attempt.lease.attempt_id}"
    completion = world.attempt(attempt.lease.attempt_id)[2]
    assert completion["object"] == {"etag": head["ETag"], "version_id": head["VersionId"]}
    control = world.one("SELECT object_key, version_id, state"
                        " FROM run_attempt_log_retention_controls")
    assert control == (grant.object_key, head["VersionId"], "pending")


def test_a_log_that_differs_from_the_claim_is_refused_and_nothing_changes(
        pg_db: PgDb, engine: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    world, bucket = World(pg_db), make_bucket(False)
    pool, attempt = _leased(world, engine)
    grant = grant_log_upload(engine, CONFIG, s3=direct_s3, bucket=bucket, pool_id=pool,
                             request=LogUploadRequest(attempt.lease, _facts(BODY)))
    # the URL's bytes are not what was claimed: other bytes land under the key with the
    # same identity metadata (a misused URL, a server that checks nothing)
    meta = {k.removeprefix("x-amz-meta-"): v for k, v in grant.headers.items()
            if k.startswith("x-amz-meta-")}
    direct_s3.put_object(Bucket=bucket, Key=grant.object_key, Body=BODY + b"tampered\n",
                         ContentType="text/plain; charset=utf-8", Metadata=meta)
    with pytest.raises(LogMismatchError):
        complete_attempt(engine, s3=direct_s3, bucket=bucket, pool_id=pool,
                         report=CompletionReport(attempt.lease, "succeeded", 0, None,
                                                 _facts(BODY)))
    assert world.attempt(attempt.lease.attempt_id)[0] == "claimed"
    assert world.one("SELECT count(*) FROM run_attempt_log_artifacts") == 0
    assert world.one("SELECT count(*) FROM run_attempt_log_retention_controls") == 0


def _client(pg_db: PgDb, engine: Any, s3: Any, bucket: str) -> Any:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from qinglong.control.api.context import ApiContext
    from qinglong.control.api.errors import install_error_handlers
    from qinglong.control.api.worker_routes import router

    app = FastAPI()
    install_error_handlers(app)
    app.state.ctx = ApiContext(engine=engine, project_id=PROJECT, s3=s3, bucket=bucket)
    app.include_router(router)
    return TestClient(app)


def _token(pg_db: PgDb, pool_id: str) -> dict[str, str]:
    from qinglong.control.auth.tokens import insert_token, new_token, token_hash
    from qinglong.control.db.engine import create_engine

    token, admin = new_token(), create_engine(pg_db.url)
    with admin.begin() as conn:
        insert_token(conn, name=f"w-{token_hash(token)[:8]}", scope="worker",  # a live name
                     sha256=token_hash(token), pool_id=pool_id)              # is unique
    admin.dispose()
    return {"Authorization": f"Bearer {token}"}


def test_a_worker_runs_an_attempt_through_the_routes(
        pg_db: PgDb, engine: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    world, bucket = World(pg_db), make_bucket(True)
    pool = world.pool({"zone": "a"})
    [run_id] = world.runs(world.task(labels={"zone": "a"}))
    client, auth = _client(pg_db, engine, direct_s3, bucket), _token(pg_db, pool)
    outside = client.post("/v1/worker/register", headers=auth,
                          json={"name": "w1", "labels": {"zone": "b"}, "concurrency": 2})
    assert (outside.status_code, outside.json()["error"]["code"]) == (403,
                                                                      "labels_outside_pool")
    reg = client.post("/v1/worker/register", headers=auth,
                      json={"name": "w1", "labels": {"zone": "a"}, "concurrency": 2})
    assert reg.status_code == 200 and reg.json()["lease_ms"] == 30_000
    inc = reg.json()["incarnation_id"]
    claimed = client.post("/v1/worker/claim", headers=auth,
                          json={"incarnation_id": inc, "max_attempts": 4}).json()["attempts"]
    assert [a["run_id"] for a in claimed] == [run_id]
    lease = claimed[0]["lease"]
    for _ in range(2):  # the second is a replay of a lost response
        started = client.post("/v1/worker/started", headers=auth, json={"lease": lease,
                                                                        "pid": 42})
        assert started.status_code == 200
    assert started.json() == {"ok": True, "replayed": True}
    beat = client.post("/v1/worker/heartbeat", headers=auth, json={"lease": lease})
    assert beat.json() == {"cancel": False, "lease_ms": 30_000}
    facts = _facts(BODY).to_json()
    grant = client.post("/v1/worker/log-upload", headers=auth,
                        json={"lease": lease, "log": facts}).json()
    assert httpx.put(grant["url"], headers=grant["headers"], content=BODY).status_code == 200
    report = {"lease": lease, "outcome": "succeeded", "exit_code": 0, "signal": None,
              "log": facts}
    first = client.post("/v1/worker/complete", headers=auth, json=report)
    again = client.post("/v1/worker/complete", headers=auth, json=report)
    assert (first.json(), again.json()) == ({"ok": True, "replayed": False},
                                            {"ok": True, "replayed": True})
    late = client.post("/v1/worker/heartbeat", headers=auth, json={"lease": lease})
    assert (late.status_code, late.json()["error"]["code"]) == (409, "lease_lost")
    assert world.run_status(run_id) == "succeeded"
    assert client.post("/v1/worker/stopped", headers=auth,
                       json={"incarnation_id": inc}).json()["ok"] is True


def test_routes_refuse_bad_bodies_other_pools_and_other_scopes(
        pg_db: PgDb, engine: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    world = World(pg_db)
    pool, attempt = _leased(world, engine)
    client = _client(pg_db, engine, direct_s3, make_bucket(False))
    own, other = _token(pg_db, pool), _token(pg_db, world.pool())
    secret = "do-not-echo-this-value"
    bad = client.post("/v1/worker/claim", headers=own,
                      json={"incarnation_id": secret, "max_attempts": 1})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
    assert secret not in bad.text
    junk = client.post("/v1/worker/heartbeat", headers=own, content=b"{not json")
    assert junk.status_code == 422
    lease = attempt.lease.to_json()
    foreign = client.post("/v1/worker/heartbeat", headers=other, json={"lease": lease})
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (409, "lease_lost")
    assert client.post("/v1/worker/heartbeat", json={"lease": lease}).status_code == 401
    assert client.post("/v1/worker/heartbeat", headers=own,
                       json={"lease": lease}).status_code == 200


def test_the_openapi_document_describes_every_worker_body(
        pg_db: PgDb, engine: Any, direct_s3: Any) -> None:
    doc = _client(pg_db, engine, direct_s3, "b").get("/openapi.json").json()
    paths = {p for p in doc["paths"] if p.startswith("/v1/worker/")}
    assert paths == {f"/v1/worker/{name}" for name in (
        "register", "claim", "started", "heartbeat", "log-upload", "bundle", "log-chunk",
        "complete", "stopped", "complete-no-output")}
    for path in paths:
        op = doc["paths"][path]["post"]
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        assert schema["type"] == "object" and schema["required"]
        assert "$ref" not in str(schema)


def test_a_completion_whose_exit_code_no_column_holds_is_422_and_the_lease_stays_live(
        pg_db: PgDb, engine: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    """Found by the fuzz test: an exit code or signal beyond ``integer`` reached PostgreSQL
    and answered 500 ``internal``; the wire type now bounds them to a wait status."""
    world = World(pg_db)
    pool, attempt = _leased(world, engine)
    client, auth = _client(pg_db, engine, direct_s3, make_bucket(False)), _token(pg_db, pool)
    report = {"lease": attempt.lease.to_json(), "outcome": "failed", "exit_code": 1,
              "signal": None, "log": None}
    for wide in ({"exit_code": 2**31}, {"exit_code": None, "signal": 2**31}):
        refused = client.post("/v1/worker/complete", headers=auth, json={**report, **wide})
        assert (refused.status_code, refused.json()["error"]["code"]) == (422,
                                                                          "invalid_request")
    assert world.attempt(attempt.lease.attempt_id)[0] == "claimed"
    done = client.post("/v1/worker/complete", headers=auth, json={**report, "exit_code": 255})
    assert done.json() == {"ok": True, "replayed": False}
    assert world.attempt(attempt.lease.attempt_id)[0] == "failed"


@pytest.mark.parametrize("retention_s", [2**63 - 1, 10**13])
def test_a_retention_no_timestamp_can_reach_is_refused_and_the_longest_completes_a_logged_run(
        pg_db: PgDb, s3: Any, make_bucket: Callable[[bool], str], retention_s: int) -> None:
    """Found reviewing the API for 5xx: ``log_retention_s`` up to 2^63−1 was accepted, and
    the run's completion with a log then failed in PostgreSQL (``finished_at`` + retention is
    beyond the last timestamp) with 500 — every retry too, until the lease was lost. The API
    now bounds retention to ``MAX_LOG_RETENTION_S`` (a century); at that bound a task's run
    completes with its log through the worker routes and is enrolled."""
    from api_world import close_world, open_world

    from qinglong.control.api.task_models import MAX_LOG_RETENTION_S

    bucket = make_bucket(False)
    api = open_world(pg_db, s3=s3, bucket=bucket)
    try:
        admin, worker = api.as_("admin"), api.as_("worker")
        task = {"name": "kept", "shell": "true", "labels": {"zone": "a"}}
        too_long = api.client.post("/v1/tasks", headers=admin,
                                   json={**task, "log_retention_s": retention_s})
        assert (too_long.status_code, too_long.json()["error"]["code"]) == (422,
                                                                            "invalid_request")
        assert str(retention_s) not in too_long.text
        created = api.client.post("/v1/tasks", headers=admin,
                                  json={**task, "log_retention_s": MAX_LOG_RETENTION_S})
        assert created.status_code == 201, created.text
        patched = api.client.patch("/v1/tasks/kept", headers=admin,
                                   json={"log_retention_s": retention_s})
        assert patched.status_code == 422
        assert api.client.post("/v1/tasks/kept/run", headers=admin).status_code == 201
        inc = api.client.post("/v1/worker/register", headers=worker, json={
            "name": "w1", "labels": {"zone": "a"}, "concurrency": 1}).json()["incarnation_id"]
        (claimed,) = api.client.post("/v1/worker/claim", headers=worker, json={
            "incarnation_id": inc, "max_attempts": 1}).json()["attempts"]
        facts = _facts(BODY).to_json()
        grant = api.client.post("/v1/worker/log-upload", headers=worker,
                                json={"lease": claimed["lease"], "log": facts}).json()
        assert httpx.put(grant["url"], headers=grant["headers"], content=BODY).status_code == 200
        done = api.client.post("/v1/worker/complete", headers=worker, json={
            "lease": claimed["lease"], "outcome": "succeeded", "exit_code": 0, "signal": None,
            "log": facts})
        assert (done.status_code, done.json()) == (200, {"ok": True, "replayed": False})
        assert api.sql("SELECT count(*) FROM run_attempt_log_retention_controls"
                       " WHERE attempt_id = %(a)s",
                       {"a": claimed["lease"]["attempt_id"]}) == [(1,)]
    finally:
        close_world(api)
