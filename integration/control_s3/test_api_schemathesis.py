"""The API fuzzed from its own OpenAPI document with schemathesis (issue 11 item 7, Tests):
with valid tokens, no 5xx except the documented 503 of the log read, and every operation
reached with a 2xx at least once (the test fails otherwise).

Seeding: before each generated case a task ``backup``, a queued run, an attempt and a token
exist; about half the cases have their path parameters pointed at those objects (the rest keep
schemathesis' own values), so 2xx answers are reachable for every operation. Worker endpoints
are called with the worker token and must never answer 5xx; their 2xx paths need a live
lease and are exercised by the dispatch tests instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from api_world import ApiWorld, close_world, open_world
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pg_control_db import PgDb
from sweep_world import seed_logs

from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
schemathesis = pytest.importorskip("schemathesis")
LOG_READ = ("GET", "/v1/attempts/{attempt_id}/log")


def seed(api: ApiWorld, log_attempt: str) -> dict[str, str]:
    """A live task ``backup``, a queued run with one attempt, and a live token; the log
    read aims at ``log_attempt`` (an uploaded log in moto)."""
    api.sql("INSERT INTO tasks (id, project_id, name, log_retention_s, shell, schedule)"
            " SELECT %(t)s, %(p)s, 'backup', 0, 'echo hi', '0 3 * * *' WHERE NOT EXISTS"
            " (SELECT 1 FROM tasks WHERE project_id = %(p)s AND name = 'backup'"
            " AND deleted_at IS NULL)", {"t": uuid7(), "p": api.ctx.project_id})
    task_id = api.sql("SELECT id::text FROM tasks WHERE name = 'backup' AND deleted_at IS NULL"
                      )[0][0]
    run_id, attempt_id = uuid7(), uuid7()
    api.sql("INSERT INTO runs (id, project_id, task_id, owner, status) VALUES"
            " (%(r)s, %(p)s, %(t)s, 'runtime', 'queued')",
            {"r": run_id, "p": api.ctx.project_id, "t": task_id})
    api.sql("INSERT INTO attempts (id, run_id, number, executor, status) VALUES"
            " (%(a)s, %(r)s, 1, 'remote_worker', 'failed')", {"a": attempt_id, "r": run_id})
    token = api.client.post("/v1/tokens", json={"name": "fuzz", "scope": "viewer"},
                            headers=api.as_("admin")).json()["id"]
    return {"name": "backup", "run_id": run_id, "attempt_id": attempt_id, "token_id": token,
            "log_attempt": log_attempt}


def fuzz_one(api: ApiWorld, operation: Any, statuses: dict[tuple[str, str], set[int]],
             server_errors: list[tuple[str, str, int]], log_attempt: str) -> None:
    """Generated cases of one operation, recording statuses and forbidden 5xx answers."""
    key = (operation.method.upper(), operation.path)
    worker = operation.path.startswith("/v1/worker/")
    headers = api.as_("worker" if worker else "admin")

    @settings(max_examples=25, deadline=None, database=None,
              suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])
    @given(case=operation.as_strategy(), aim=st.booleans())
    def check(case: Any, aim: bool) -> None:
        objects = seed(api, log_attempt)
        if key == LOG_READ:
            objects["attempt_id"] = objects["log_attempt"]
        if aim and case.path_parameters:
            case.path_parameters = {k: objects.get(k, v)
                                    for k, v in case.path_parameters.items()}
        response = case.call(headers=headers)
        statuses[key].add(response.status_code)
        if response.status_code >= 500 and not (
                key == LOG_READ and response.status_code == 503):
            server_errors.append((*key, response.status_code))

    check()


def test_fuzzed_from_openapi_no_5xx_and_every_operation_2xx(
        pg_db: PgDb, s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    api = open_world(pg_db, s3=s3, bucket=bucket)
    try:
        with pg_db.sa() as conn:
            (log,) = seed_logs(conn, direct_s3, bucket, 1)
        fuzz_all(api, log.attempt_id)
    finally:
        close_world(api)


def fuzz_all(api: ApiWorld, log_attempt: str) -> None:
    """Every operation of the served document; asserts the issue's two conditions."""
    schema = schemathesis.openapi.from_url(f"{api.client.base_url}/openapi.json")
    statuses: dict[tuple[str, str], set[int]] = defaultdict(set)
    server_errors: list[tuple[str, str, int]] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        fuzz_one(api, operation, statuses, server_errors, log_attempt)
    assert server_errors == []
    unreached = sorted(k for k in statuses if not k[1].startswith("/v1/worker/")
                       and not any(200 <= s < 300 for s in statuses[k]))
    assert unreached == [], {k: statuses[k] for k in unreached}
    assert len(statuses) == len(operations)
