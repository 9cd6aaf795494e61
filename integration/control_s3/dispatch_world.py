"""Test helper for the dispatch tier: a worker pool, tasks and queued runs written as the
superuser (the way the scheduler and ``ql3 control token`` leave them), and an engine that
runs the code under test as the database's runtime role."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from pg_control_db import PgDb

from qinglong.control.db.engine import create_engine
from qinglong.shared.ids import uuid7
from qinglong.shared.wire import WorkerRegistration

PROJECT = "00000000-0000-7000-8000-0000000000aa"


def runtime_engine(db: PgDb) -> Any:
    """An engine acting as ``db.runtime_role`` (exactly the runtime grants)."""
    return create_engine(db.url + "?options=" + urllib.parse.quote("-c role=" + db.runtime_role),
                         pool_size=8, max_overflow=8)


@dataclass(frozen=True)
class World:
    db: PgDb

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        with self.db.connect() as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def one(self, statement: str, params: Any = None) -> Any:
        rows = self.sql(statement, params)
        assert len(rows) == 1, rows
        return rows[0][0] if len(rows[0]) == 1 else rows[0]

    def pool(self, labels: dict[str, str] | None = None) -> str:
        pool_id = uuid7()
        self.sql("INSERT INTO worker_pools (id, name, labels) VALUES (%s, %s, %s)",
                 (pool_id, f"pool-{pool_id[-8:]}", json.dumps(labels or {})))
        return pool_id

    def task(self, *, labels: dict[str, str] | None = None, policy: str = "allow",
             max_attempts: int = 1, backoff_ms: int = 0, cap_ms: int = 0,
             retention_s: int = 3600) -> str:
        task_id = uuid7()
        self.sql(
            "INSERT INTO tasks (id, project_id, name, log_retention_s, argv, env, labels,"
            " concurrency_policy, max_attempts, retry_backoff_ms, retry_backoff_cap_ms,"
            " timeout_s) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 30)",
            (task_id, PROJECT, f"t-{task_id[-12:]}", retention_s, json.dumps(["echo", "hi"]),
             json.dumps({"A": {"value": "1", "secret": False},
                         "TOKEN": {"value": "s3cret", "secret": True}}),
             json.dumps(labels or {}), policy, max_attempts, backoff_ms, cap_ms))
        return task_id

    def runs(self, task_id: str, n: int = 1) -> list[str]:
        ids = [uuid7() for _ in range(n)]
        for run_id in ids:
            self.sql("INSERT INTO runs (id, project_id, task_id, owner, status, trigger)"
                     " VALUES (%s, %s, %s, 'runtime', 'queued', 'manual')",
                     (run_id, PROJECT, task_id))
        return ids

    def expire(self, attempt_id: str) -> None:
        """Move the lease's expiry into the past on the database clock."""
        self.sql("UPDATE attempts SET lease_expires_at = now() - interval '1 ms'"
                 " WHERE id = %s", (attempt_id,))

    def attempt(self, attempt_id: str) -> tuple[Any, ...]:
        """(status, reason, completion) of one attempt."""
        row: tuple[Any, ...] = self.one(
            "SELECT status, reason, completion FROM attempts WHERE id = %s", (attempt_id,))
        return row

    def run_status(self, run_id: str) -> str:
        return str(self.one("SELECT status FROM runs WHERE id = %s", (run_id,)))


def registration(name: str = "w1", labels: dict[str, str] | None = None) -> WorkerRegistration:
    return WorkerRegistration(name=name, labels=labels or {}, concurrency=4)
