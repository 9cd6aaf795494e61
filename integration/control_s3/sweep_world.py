"""Test helper for the sweeper tier: uploaded log objects recorded in PostgreSQL and enrolled
for retention, the way a worker and the terminal transition leave them (docs/protocols.md §4.2)."""

from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from sqlalchemy import Connection

from qinglong.control.retention.enrollment import enroll_run
from qinglong.control.retention.objects import ArtifactIdentity
from qinglong.shared.ids import uuid7

UPLOADERS = 8  # seed_logs' uploads at a time


@dataclass(frozen=True)
class Logged:
    attempt_id: str
    identity: ArtifactIdentity
    body: bytes


def seed_logs(
    conn: Connection, client: Any, bucket: str, n: int, repeat: int | None = None
) -> list[Logged]:
    """``n`` finished remote attempts of one run, each with an uploaded log, enrolled and due.

    Log ``k`` holds its line ``k`` times (distinct sizes), or ``repeat`` times for all
    (equal sizes, as bench/retention.py wants). The logs are uploaded first, ``UPLOADERS``
    at a time (the boto3 ``client`` is thread-safe), then recorded in one transaction on the
    idle SQLAlchemy ``conn`` and enrolled in it as the terminal transition does."""
    project_id, task_id, run_id = uuid7(), uuid7(), uuid7()
    drafts: list[tuple[str, ArtifactIdentity, bytes]] = []
    for number in range(1, n + 1):
        attempt_id = uuid7()
        body = f"attempt {attempt_id} line\n".encode() * (repeat or number)
        drafts.append((attempt_id, ArtifactIdentity(
            bucket=bucket, key=f"p/{project_id}/wlog-{attempt_id}", version_id=None,
            content_type="text/plain; charset=utf-8", size=len(body),
            sha256=hashlib.sha256(body).hexdigest(),
            metadata={"project": project_id, "run": run_id, "attempt": attempt_id,
                      "artifact": f"wlog-{attempt_id}"}), body))

    def upload(draft: tuple[str, ArtifactIdentity, bytes]) -> Logged:
        attempt_id, ident, body = draft
        resp = client.put_object(Bucket=bucket, Key=ident.key, Body=body,
                                 ContentType=ident.content_type,
                                 Metadata=ident.object_metadata())
        version = resp.get("VersionId")
        version = None if not version or version == "null" else version
        return Logged(attempt_id, ArtifactIdentity(
            bucket, ident.key, version, ident.content_type, ident.size, ident.sha256,
            ident.metadata), body)

    if n > 1:
        with ThreadPoolExecutor(min(UPLOADERS, n)) as pool:
            out = list(pool.map(upload, drafts))
    else:
        out = [upload(d) for d in drafts]
    with conn.begin():
        conn.exec_driver_sql("INSERT INTO tasks (id, project_id, name, log_retention_s)"
                             " VALUES (%s, %s, 'job', 0)", (task_id, project_id))
        conn.exec_driver_sql(
            "INSERT INTO runs (id, project_id, task_id, owner, status, finished_at)"
            " VALUES (%s, %s, %s, 'runtime', 'succeeded', now() - interval '1 hour')",
            (run_id, project_id, task_id))
        if out:
            conn.exec_driver_sql(
                "INSERT INTO attempts (id, run_id, number, executor, status, finished_at)"
                " VALUES (%s, %s, %s, 'remote_worker', 'succeeded',"
                " now() - interval '1 hour')",
                [(log.attempt_id, run_id, number) for number, log in enumerate(out, 1)])
            conn.exec_driver_sql(
                "INSERT INTO run_attempt_log_artifacts (id, attempt_id, project_id, run_id,"
                " bucket, object_key, version_id, size_bytes, sha256, content_type, metadata)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [(f"wlog-{log.attempt_id}", log.attempt_id, project_id, run_id, bucket,
                  log.identity.key, log.identity.version_id, log.identity.size,
                  log.identity.sha256, log.identity.content_type,
                  Jsonb(dict(log.identity.metadata))) for log in out])
        enroll_run(conn, run_id)
    return out


def exists(client: Any, ident: ArtifactIdentity) -> bool:
    """Whether the recorded object (its exact version, when versioned) is still stored."""
    kwargs: dict[str, Any] = {"Bucket": ident.bucket, "Key": ident.key}
    if ident.version_id:
        kwargs["VersionId"] = ident.version_id
    try:
        client.head_object(**kwargs)
    except client.exceptions.ClientError as exc:
        if exc.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return False
        raise
    return True


def rows(conn: psycopg.Connection[Any], sql: str) -> list[tuple[Any, ...]]:
    return conn.execute(sql).fetchall()  # type: ignore[arg-type]


def make_due(conn: psycopg.Connection[Any]) -> None:
    """Time passes: every pending control's retry time and lease are over."""
    conn.execute("UPDATE run_attempt_log_retention_controls SET due_at = now() - interval"
                 " '1 s', lease_expires_at = CASE WHEN lease_expires_at IS NULL THEN NULL"
                 " ELSE now() - interval '1 s' END WHERE state = 'pending'")
