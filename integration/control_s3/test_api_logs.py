"""``GET /v1/attempts/{id}/log`` over real PostgreSQL (runtime role) and moto over HTTP:
200 with the bytes, 410 with retirement time and outcome, 503 when missing without a
tombstone (docs/protocols.md §4.4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from api_world import close_world, open_world
from pg_control_db import PgDb
from sweep_world import seed_logs

from qinglong.control.retention.claims import ClaimOwner
from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def test_log_read_answers_200_then_410_and_503_when_lost(
        pg_db: PgDb, s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    api = open_world(pg_db, s3=s3, bucket=bucket)
    engine = pg_db.engine()
    try:
        with pg_db.sa() as conn:
            kept, lost = seed_logs(conn, direct_s3, bucket, 2)
        viewer = api.as_("viewer")
        ok = api.client.get(f"/v1/attempts/{kept.attempt_id}/log", headers=viewer)
        assert (ok.status_code, ok.content) == (200, kept.body)
        assert ok.headers["content-type"].startswith("text/plain")
        direct_s3.delete_object(Bucket=bucket, Key=lost.identity.key)  # out of band
        gone = api.client.get(f"/v1/attempts/{lost.attempt_id}/log", headers=viewer)
        assert (gone.status_code, gone.json()["error"]["code"]) == (503, "log_unavailable")
        sweeper = RunAttemptLogRetentionSweeper(engine, s3,
                                                ClaimOwner("replica-api", "c" * 32),
                                                probe_bucket=bucket)
        sweeper.probe()
        sweeper.run_once()
        retired = api.client.get(f"/v1/attempts/{kept.attempt_id}/log", headers=viewer)
        error = retired.json()["error"]
        assert retired.status_code == 410 and error["code"] == "log_retired"
        assert error["outcome"] == "deleted" and error["retired_at"]
        unknown = api.client.get(f"/v1/attempts/{uuid7()}/log", headers=viewer)
        assert unknown.status_code == 404
    finally:
        engine.dispose()
        close_world(api)


def test_no_configured_store_is_503(pg_db: PgDb) -> None:
    api = open_world(pg_db)
    try:
        answer = api.client.get(f"/v1/attempts/{uuid7()}/log", headers=api.as_("viewer"))
        assert (answer.status_code, answer.json()["error"]["code"]) == (503, "log_unavailable")
    finally:
        close_world(api)


def test_integrity_mismatches_answer_their_documented_503_codes(
        pg_db: PgDb, s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    """An object that differs from its record, or a tampered tombstone, is never served
    (fail closed): 503 with its stable code, as the OpenAPI document says — these answered
    500 ``internal``-class before, a 5xx the fuzz rule forbids."""
    bucket = make_bucket(False)
    api = open_world(pg_db, s3=s3, bucket=bucket)
    engine = pg_db.engine()
    try:
        with pg_db.sa() as conn:
            swapped, retired = seed_logs(conn, direct_s3, bucket, 2)
        direct_s3.put_object(Bucket=bucket, Key=swapped.identity.key,  # out of band
                             Body=b"not the recorded log\n", ContentType="text/plain")
        sweeper = RunAttemptLogRetentionSweeper(engine, s3,
                                                ClaimOwner("replica-api", "d" * 32),
                                                probe_bucket=bucket)
        sweeper.probe()
        result = sweeper.run_once()  # retires ``retired``; refuses to delete ``swapped``
        assert (result["deleted"], result["artifact_integrity_mismatch"]) == (1, 1), result
        with pg_db.connect() as conn:  # the schema owner: the runtime role cannot UPDATE
            conn.execute("UPDATE run_attempt_log_artifact_tombstones SET retired_at ="
                         " retired_at + interval '1 s' WHERE attempt_id = %s",
                         (retired.attempt_id,))
        viewer = api.as_("viewer")
        for logged, code in ((swapped, "artifact_integrity_mismatch"),
                             (retired, "tombstone_integrity_mismatch")):
            answer = api.client.get(f"/v1/attempts/{logged.attempt_id}/log", headers=viewer)
            assert (answer.status_code, answer.json()["error"]["code"]) == (503, code)
            assert b"not the recorded" not in answer.content
        documented = api.client.get("/openapi.json").json()["paths"][
            "/v1/attempts/{attempt_id}/log"]["get"]["responses"]["503"]["description"]
        assert "artifact_integrity_mismatch" in documented
        assert "tombstone_integrity_mismatch" in documented
    finally:
        engine.dispose()
        close_world(api)


def test_a_running_attempt_s_log_is_readable_and_a_lost_one_without_output_is_not_found(
        pg_db: PgDb, s3: Any, make_bucket: Callable[[bool], str]) -> None:
    """200 with the log so far (empty here: no chunk yet) while the attempt is claimed,
    starting or running — no more 404 ``log_pending`` (docs/protocols.md §4.4); 404
    ``log_not_found`` once it ended without any log (lost) and for an unknown id. Both codes
    are documented under the route's 404 in OpenAPI."""
    api = open_world(pg_db, s3=s3, bucket=make_bucket(False))
    try:
        project_id, task_id, run_id, attempt_id = uuid7(), uuid7(), uuid7(), uuid7()
        api.sql("INSERT INTO tasks (id, project_id, name, log_retention_s) VALUES"
                " (%(t)s, %(p)s, 'job', 60)",
                {"t": task_id, "p": project_id})
        api.sql("INSERT INTO runs (id, project_id, task_id, owner, status) VALUES"
                " (%(r)s, %(p)s, %(t)s, 'runtime', 'running')",
                {"r": run_id, "p": project_id, "t": task_id})
        api.sql("INSERT INTO attempts (id, run_id, number, executor, status) VALUES"
                " (%(a)s, %(r)s, 1, 'remote_worker', 'claimed')", {"a": attempt_id, "r": run_id})
        viewer = api.as_("viewer")
        for status in ("claimed", "starting", "running"):
            api.sql("UPDATE attempts SET status = %(s)s WHERE id = %(a)s",
                    {"s": status, "a": attempt_id})
            running = api.client.get(f"/v1/attempts/{attempt_id}/log", headers=viewer)
            assert (running.status_code, running.content) == (200, b"")
            assert (running.headers["QL3-Attempt-Status"],
                    running.headers["QL3-Log-State"]) == (status, "running")
        api.sql("UPDATE attempts SET status = 'lost', finished_at = now() WHERE id = %(a)s",
                {"a": attempt_id})
        lost = api.client.get(f"/v1/attempts/{attempt_id}/log", headers=viewer)
        assert (lost.status_code, lost.json()["error"]["code"]) == (404, "log_not_found")
        unknown = api.client.get(f"/v1/attempts/{uuid7()}/log", headers=viewer)
        assert unknown.json()["error"]["code"] == "log_not_found"
        doc = api.client.get("/openapi.json").json()
        described = doc["paths"]["/v1/attempts/{attempt_id}/log"]["get"]["responses"]["404"]
        assert "log_pending" in described["description"]
        assert "log_not_found" in described["description"]
    finally:
        close_world(api)
