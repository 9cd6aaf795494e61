"""Helpers for the scheduler tests: an engine acting as the runtime role, task seeding."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import psycopg
from pg_control_db import PgDb
from sqlalchemy import Engine

from qinglong.control.db.engine import create_engine
from qinglong.shared.ids import uuid7


def runtime_engine(db: PgDb, *, pool_size: int = 5) -> Engine:
    """An engine that runs every statement as ``db.runtime_role`` (proves the grants)."""
    options = urllib.parse.quote("-c role=" + db.runtime_role)
    return create_engine(f"{db.url}?options={options}", pool_size=pool_size)


def seed_task(conn: psycopg.Connection[Any], *, schedule: str | None = None,
              timezone: str = "UTC", policy: str = "forbid", grace_s: int = 60,
              enabled: bool = True, deleted: bool = False,
              next_fire_sql: str | None = None) -> str:
    """One task (as the superuser); ``next_fire_sql`` an SQL expression for next_fire_at."""
    task_id = uuid7()
    conn.execute(
        "INSERT INTO tasks (id, project_id, name, log_retention_s, argv, schedule, timezone,"
        " concurrency_policy, catchup_grace_s, enabled, deleted_at, next_fire_at)"
        f" VALUES (%s, %s, %s, 0, %s, %s, %s, %s, %s, %s, {'now()' if deleted else 'NULL'},"
        f" {next_fire_sql or 'NULL'})",
        (task_id, uuid7(), f"job-{task_id[-8:]}", json.dumps(["true"]), schedule, timezone,
         policy, grace_s, enabled),
    )
    return task_id
