"""``GET /v1/tasks`` filtered by label and searched by text at 10,000 tasks (docs/protocols.md
§4.5 "Listing tasks"): milliseconds per first page (limit 50) through the real app, served by
uvicorn, acting as the runtime role, against a fresh migrated database on the local
PostgreSQL 15; each figure also as a ratio to the unfiltered first page of the same run.

- ``all``: no filter (the baseline: the name index serves the page);
- ``label`` (one match in 100, and a label no task has): JSONB containment through the GIN
  index of migration 0008;
- ``q`` matching one task in 100, and matching none (the worst case: every live task of the
  project is read, name, shell and argv compared case-insensitively — the "bounded scan").

Usage: python bench/task_search.py [TASKS] [REPEATS]
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

from bench_support import ROOT, migrated_database

sys.path.insert(0, str(ROOT / "integration" / "control"))

from api_world import close_world, open_world
from pg_control_db import PgDb


def seed(world: Any, count: int) -> None:
    """``count`` tasks named ``京东签到-NNNNN``, one in 100 labelled ``platform=淘宝`` and
    running ``echo 淘宝签到`` (the others ``echo 签到成功``)."""
    world.sql(
        "INSERT INTO tasks (id, project_id, name, name_key, log_retention_s, created_at, argv,"
        " timezone, env, max_attempts, retry_backoff_ms, retry_backoff_cap_ms,"
        " concurrency_policy, catchup_grace_s, labels, log_limit_bytes, enabled,"
        " schedule_version, run_counter, version, updated_at)"
        " SELECT gen_random_uuid(), %(p)s, '京东签到-' || lpad(i::text, 5, '0'),"
        " '京东签到-' || lpad(i::text, 5, '0'), 604800, now(),"
        " CASE WHEN i %% 100 = 0 THEN '[\"sh\", \"-c\", \"echo 淘宝签到\"]'::jsonb"
        "      ELSE '[\"sh\", \"-c\", \"echo 签到成功\"]'::jsonb END,"
        " 'Asia/Shanghai', '{}', 1, 10000, 600000, 'forbid', 60,"
        " CASE WHEN i %% 100 = 0 THEN '{\"platform\": \"淘宝\", \"zone\": \"a\"}'::jsonb"
        "      ELSE '{\"zone\": \"a\"}'::jsonb END, 16777216, true, 1, 0, 1, now()"
        " FROM generate_series(1, %(n)s) AS i",
        {"p": world.ctx.project_id, "n": count})
    world.sql("ANALYZE tasks")


def first_page_ms(world: Any, params: dict[str, Any], repeats: int) -> tuple[float, int]:
    """Median ms of ``GET /v1/tasks?params&limit=50`` and how many items it answered."""
    times, found = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        answer = world.client.get("/v1/tasks", params={**params, "limit": 50},
                                  headers=world.as_("viewer"))
        times.append((time.perf_counter() - start) * 1000)
        assert answer.status_code == 200, answer.text
        found = len(answer.json()["items"])
    return statistics.median(times), found


def main(count: int, repeats: int) -> None:
    with migrated_database("bts") as (name, role):
        world = open_world(PgDb(name, role))
        try:
            seed(world, count)
            cases = {
                "all": {},
                "label, 1 in 100": {"label": ["platform=淘宝"]},
                "label, none": {"label": ["platform=京东"]},
                "q, 1 in 100": {"q": "淘宝"},
                "q, none": {"q": "拼多多"},
            }
            base = 0.0
            print(f"GET /v1/tasks at {count} tasks, first page (limit 50), median of {repeats}")
            for label, params in cases.items():
                ms, found = first_page_ms(world, params, repeats)
                base = base or ms
                print(f"  {label:16} {ms:8.1f} ms  {ms / base:5.2f}x  ({found} items)")
        finally:
            close_world(world)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000,
         int(sys.argv[2]) if len(sys.argv) > 2 else 15)
