"""Helpers for the control-plane PostgreSQL tests: URLs, throwaway databases, seed data."""

from __future__ import annotations

import secrets
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import Connection, Engine

from qinglong.control.db.engine import create_engine
from qinglong.shared.ids import uuid7

if TYPE_CHECKING:
    from pg_reaper import Reaper

PG_HOST = "127.0.0.1"
PG_PORT = 5432


def db_url(name: str) -> str:
    return f"postgresql://postgres@{PG_HOST}:{PG_PORT}/{name}"


def unique(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(db_url("postgres"), autocommit=True, connect_timeout=10)


def drop_database(name: str) -> None:
    with admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_role(name: str, attempts: int = 5) -> None:
    """``DROP ROLE IF EXISTS``, retried when it meets a concurrent catalog change (another
    session dropping roles or a database: "tuple concurrently deleted/updated")."""
    for attempt in range(attempts):
        try:
            with admin() as conn:
                conn.execute(f'DROP ROLE IF EXISTS "{name}"')
            return
        except psycopg.errors.InternalError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))


@dataclass(frozen=True)
class PgDb:
    """One throwaway database cloned from the migrated template, with its own runtime role."""

    name: str
    runtime_role: str

    @property
    def url(self) -> str:
        return db_url(self.name)

    @property
    def runtime_url(self) -> str:
        """The URL acting as the runtime role (a NOLOGIN role: the superuser SETs it)."""
        return self.url + "?options=" + urllib.parse.quote("-c role=" + self.runtime_role)

    def connect(self) -> psycopg.Connection[Any]:
        """A plain autocommit psycopg connection: the tests' own setup and assertions."""
        return psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    def engine(self, url: str | None = None, **kwargs: Any) -> Engine:
        """The control plane's engine (``db/engine.py``) on ``url`` (default: superuser);
        the caller disposes it."""
        return create_engine(url or self.url, **kwargs)

    @contextmanager
    def pooled(self, url: str | None = None, **kwargs: Any) -> Iterator[Engine]:
        """``engine(url, **kwargs)``, disposed on exit (readiness, sweepers, gates)."""
        engine = self.engine(url, **kwargs)
        try:
            yield engine
        finally:
            engine.dispose()

    @contextmanager
    def sa(self, url: str | None = None) -> Iterator[Connection]:
        """One idle SQLAlchemy connection of a throwaway engine: what the API takes."""
        engine = self.engine(url, pool_size=1, max_overflow=0)
        try:
            with engine.connect() as conn:
                yield conn
        finally:
            engine.dispose()


def new_clone(template: PgDb) -> PgDb:
    """A migrated database copied from ``template`` (``CREATE DATABASE … TEMPLATE``; nobody
    may be connected to the template) with a runtime role of its own holding the runtime
    grants; the caller drops it (``drop_clone``)."""
    from qinglong.control.db.roles import apply_runtime_grants

    db = PgDb(unique("ql3t"), unique("ql3rt"))
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{db.name}" TEMPLATE "{template.name}"')
    try:
        with db.sa() as conn, conn.begin():
            apply_runtime_grants(conn, db.runtime_role)
    except BaseException:
        drop_clone(db)
        raise
    return db


def drop_clone(db: PgDb, reaper: Reaper | None = None) -> None:
    """Drop ``db`` and its runtime role (handed to ``reaper`` when given, which drops them
    behind the caller)."""
    if reaper is not None:
        reaper.drop(db_url("postgres"), db.name, db.runtime_role)
    else:
        drop_database(db.name)
        drop_role(db.runtime_role)


@contextmanager
def clone(template: PgDb, reaper: Reaper | None = None) -> Iterator[PgDb]:
    """``new_clone(template)``, dropped with its role on exit (``drop_clone``)."""
    db = new_clone(template)
    try:
        yield db
    finally:
        drop_clone(db, reaper)


@dataclass(frozen=True)
class Seeded:
    run_id: str
    attempt_ids: list[str]


def seed_run(
    conn: Connection,
    *,
    attempts: int = 1,
    retention_s: int = 0,
    finished_ago_s: int = 3600,
    run_status: str = "succeeded",
    attempt_status: str = "succeeded",
    executor: str = "remote_worker",
    owner: str = "runtime",
    version_id: str | None = None,
    artifacts: bool = True,
    enroll: bool = False,
) -> Seeded:
    """A finished run (times from the database clock) with attempts and their log artifacts,
    written in one transaction on the idle SQLAlchemy ``conn``; ``enroll`` enrolls it in
    that same transaction (as the terminal transition does)."""
    from qinglong.control.retention.enrollment import enroll_run

    project_id, task_id, run_id = uuid7(), uuid7(), uuid7()
    finished = f"now() - make_interval(secs => {int(finished_ago_s)})"
    terminal = run_status not in {"queued", "dispatching", "running"}
    with conn.begin():
        conn.exec_driver_sql("INSERT INTO tasks (id, project_id, name, log_retention_s)"
                     " VALUES (%s, %s, 'job', %s)", (task_id, project_id, retention_s))
        conn.exec_driver_sql(
            f"INSERT INTO runs (id, project_id, task_id, owner, status, finished_at)"
            f" VALUES (%s, %s, %s, %s, %s, {finished if terminal else 'NULL'})",
            (run_id, project_id, task_id, owner, run_status),
        )
        ids = []
        for number in range(1, attempts + 1):
            attempt_id = uuid7()
            ids.append(attempt_id)
            conn.exec_driver_sql(
                f"INSERT INTO attempts (id, run_id, number, executor, status, finished_at)"
                f" VALUES (%s, %s, %s, %s, %s, {finished})",
                (attempt_id, run_id, number, executor, attempt_status),
            )
            if artifacts:
                conn.exec_driver_sql(
                    "INSERT INTO run_attempt_log_artifacts (id, attempt_id, project_id, run_id,"
                    " bucket, object_key, version_id, size_bytes, sha256, content_type, metadata)"
                    " VALUES (%s, %s, %s, %s, 'logs', %s, %s, 42, %s, 'text/plain', '{}')",
                    (f"wlog-{attempt_id}", attempt_id, project_id, run_id,
                     f"p/{project_id}/wlog-{attempt_id}", version_id, "a" * 64),
                )
        if enroll:
            enroll_run(conn, run_id)
    return Seeded(run_id, ids)


BULK_SQL = """
CREATE TEMP TABLE bulk AS
  SELECT gen_random_uuid() AS run_id, gen_random_uuid() AS attempt_id, g AS n
  FROM generate_series(1, %(n)s) AS g;
INSERT INTO tasks (id, project_id, name, log_retention_s)
  VALUES ('00000000-0000-7000-8000-000000000001', '00000000-0000-7000-8000-000000000002', 'b', 0);
INSERT INTO runs (id, project_id, task_id, owner, status, finished_at)
  SELECT run_id, '00000000-0000-7000-8000-000000000002', '00000000-0000-7000-8000-000000000001',
         'runtime', 'succeeded', now() - interval '1 day' FROM bulk;
INSERT INTO attempts (id, run_id, number, executor, status, finished_at)
  SELECT attempt_id, run_id, 1, 'remote_worker', 'succeeded', now() - interval '1 day' FROM bulk;
INSERT INTO run_attempt_log_artifacts (id, attempt_id, project_id, run_id, bucket, object_key,
    size_bytes, sha256, content_type, metadata)
  SELECT 'wlog-' || attempt_id, attempt_id, '00000000-0000-7000-8000-000000000002', run_id,
         'logs', 'k/' || attempt_id, 1, repeat('b', 64), 'text/plain', '{}' FROM bulk;
INSERT INTO run_attempt_log_retention_controls (attempt_id, project_id, run_id, artifact_id,
    bucket, object_key, size_bytes, sha256, content_type, eligible_at, due_at)
  SELECT attempt_id, '00000000-0000-7000-8000-000000000002', run_id, 'wlog-' || attempt_id,
         'logs', 'k/' || attempt_id, 1, repeat('b', 64), 'text/plain',
         now() - interval '1 day', now() - interval '1 day' + n * interval '1 microsecond'
  FROM bulk;
DROP TABLE bulk;
"""


def seed_bulk(conn: psycopg.Connection[Any], n: int) -> None:
    """``n`` due controls with their runs, attempts and artifacts, in one transaction on a
    plain psycopg connection (setup only)."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")  # skip FK triggers: speed
        conn.execute(BULK_SQL.replace("%(n)s", str(int(n))))
