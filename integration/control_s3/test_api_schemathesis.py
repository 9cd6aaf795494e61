"""The API fuzzed from its own OpenAPI document with schemathesis (issue 11 item 7, Tests):
with valid tokens, no 5xx except the documented 503 of the log read, and every operation —
the worker endpoints included — reached with a 2xx at least once (the test fails otherwise).

Seeding, before each aimed case (below), of what the operation needs:

- Viewer/operator/admin endpoints (called with the admin token): a task ``backup``, a queued
  run with one attempt, a token and an unused script bundle; the log read aims at an
  uploaded log in moto; an aimed bundle push sends a valid gzip tar.
- Worker endpoints (called with a worker-pool token of pool ``pool-a``, labels
  ``zone=a``): an incarnation of that pool registered and, for the lease writes (started,
  heartbeat, log-upload, log-chunk, complete), a queued run of task ``fuzz-worker``
  (labels ``zone=a``) claimed through ``dispatch.claims.claim_attempts``, so a live lease
  exists (for the bundle grant, a run of task ``fuzz-bundle``, which names a pushed
  bundle).

About half the cases are *aimed*: their path parameters point at the seeded objects and,
for the worker endpoints, the generated body's fence fields (``lease``, ``incarnation_id``,
``labels``; ``log`` of a completion, since nothing was uploaded) are replaced by the seeded
ones; every other generated field is kept when the wire type accepts it and replaced by a
valid value otherwise, so generated values (exit codes, pids, log facts, claim sizes) reach
the database and S3 signing on a live lease. The other half keep schemathesis' own values.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest
from api_world import ApiWorld, close_world, open_world
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pg_control_db import PgDb
from sweep_world import seed_logs

from qinglong.control.dispatch.claims import claim_attempts
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.workers import register_incarnation
from qinglong.shared import wire
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
schemathesis = pytest.importorskip("schemathesis")
# a bundle push sends the gzip tar's bytes as they are
schemathesis.serializer.alias("application/gzip", "application/octet-stream")
LOG_READ = ("GET", "/v1/attempts/{attempt_id}/log")
PUSH = ("POST", "/v1/scripts")
WORKER = "/v1/worker/"
EXAMPLES = int(os.environ.get("QL3_FUZZ_EXAMPLES", "25"))  # more for a local hunt
POOL_LABELS = {"zone": "a"}
# operation path -> (wire type of its body, fields the seeding decides, needs a live lease)
WORKER_OPS: dict[str, tuple[type[wire._Wire], frozenset[str], bool]] = {
    "/v1/worker/register": (wire.WorkerRegistration, frozenset({"labels"}), False),
    "/v1/worker/claim": (wire.ClaimRequest, frozenset({"incarnation_id"}), False),
    "/v1/worker/started": (wire.StartedReport, frozenset({"lease"}), True),
    "/v1/worker/heartbeat": (wire.HeartbeatReport, frozenset({"lease"}), True),
    "/v1/worker/log-upload": (wire.LogUploadRequest, frozenset({"lease"}), True),
    "/v1/worker/bundle": (wire.BundleRequest, frozenset({"lease", "digest"}), True),
    "/v1/worker/complete": (wire.CompletionReport, frozenset({"lease", "log"}), True),
    "/v1/worker/complete-no-output": (wire.CompletionReport,
                                      frozenset({"lease", "log", "layout"}), True),
    "/v1/worker/log-chunk": (wire.LogChunkBatch, frozenset({"chunks"}), True),
    "/v1/worker/stopped": (wire.WorkerStopped, frozenset({"incarnation_id"}), False),
}


CHANNEL_URL = "json://127.0.0.1:9/fuzz"  # never sent: the fuzz world runs no notify loop


def seed(api: ApiWorld, log_attempt: str) -> dict[str, str]:
    """A live task ``backup``, a queued run with one failed attempt (``attempt_count`` 1, as
    a requeue leaves it: the next claim makes attempt 2), and a live token; the log read
    aims at ``log_attempt`` (an uploaded log in moto)."""
    # policy allow: its queued run must not make run now a 409 (forbid would)
    api.sql("INSERT INTO tasks (id, project_id, name, log_retention_s, shell, schedule,"
            " concurrency_policy)"
            " SELECT %(t)s, %(p)s, 'backup', 0, 'echo hi', '0 3 * * *', 'allow' WHERE NOT EXISTS"
            " (SELECT 1 FROM tasks WHERE project_id = %(p)s AND name = 'backup'"
            " AND deleted_at IS NULL)", {"t": uuid7(), "p": api.ctx.project_id})
    task_id = api.sql("SELECT id::text FROM tasks WHERE name = 'backup' AND deleted_at IS NULL"
                      )[0][0]
    run_id, attempt_id = uuid7(), uuid7()
    api.sql("INSERT INTO runs (id, project_id, task_id, owner, status, attempt_count) VALUES"
            " (%(r)s, %(p)s, %(t)s, 'runtime', 'queued', 1)",
            {"r": run_id, "p": api.ctx.project_id, "t": task_id})
    api.sql("INSERT INTO attempts (id, run_id, number, executor, status) VALUES"
            " (%(a)s, %(r)s, 1, 'remote_worker', 'failed')", {"a": attempt_id, "r": run_id})
    token = api.client.post("/v1/tokens", json={"name": f"fuzz-{uuid7()}", "scope": "viewer"},
                            headers=api.as_("admin")).json()["id"]
    # a global variable named like the task (``{name}`` aims at both) and a push channel:
    # one made earlier while it lives (the channel test sends to every channel,
    # so a channel per seed would make each send cost more than the last)
    api.sql("INSERT INTO global_variables (name) VALUES ('backup') ON CONFLICT DO NOTHING")
    api.sql("INSERT INTO global_variable_values (name, position, value) VALUES"
            " ('backup', 1, 'fuzz-value') ON CONFLICT DO NOTHING")
    live = api.sql("SELECT id::text FROM notify_channels ORDER BY created_at LIMIT 1")
    if live:
        channel_id = live[0][0]
    else:
        channel = api.client.post("/v1/notify/channels", json={"url": CHANNEL_URL},
                                  headers=api.as_("admin"))
        assert channel.status_code == 201, channel.text
        channel_id = channel.json()["id"]
    return {"name": "backup", "run_id": run_id, "attempt_id": attempt_id, "token_id": token,
            "log_attempt": log_attempt, "digest": push_bundle(api), "ref": run_id,
            "channel_id": channel_id}


def tiny_bundle() -> bytes:
    """A valid gzip tar with one unique file (a new digest each call)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        data = f"echo {uuid7()}\n".encode()
        info = tarfile.TarInfo("run.sh")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def push_bundle(api: ApiWorld) -> str:
    """A new unused bundle pushed through the API (so a removal of it answers 204)."""
    answer = api.client.post("/v1/scripts", content=tiny_bundle(),
                             headers={"Content-Type": "application/gzip", **api.as_("admin")})
    assert answer.status_code == 201, answer.text
    digest: str = answer.json()["digest"]
    return digest


class WorkerSeed:
    """What the worker endpoints need, written through the dispatch service functions as
    the runtime role (the engine the API itself uses)."""

    def __init__(self, api: ApiWorld) -> None:
        self.api = api
        self.config = DispatchConfig(lease_ms=api.ctx.lease_ms,
                                     heartbeat_ms=api.ctx.heartbeat_ms)
        self.pool_id = api.sql("SELECT id::text FROM worker_pools WHERE name = 'pool-a'")[0][0]
        self.task_id = uuid7()
        api.sql("INSERT INTO tasks (id, project_id, name, log_retention_s, shell, labels)"
                " VALUES (%(t)s, %(p)s, 'fuzz-worker', 0, 'true', %(l)s)",
                {"t": self.task_id, "p": api.ctx.project_id, "l": json.dumps(POOL_LABELS)})
        # a task running a script bundle, for the bundle grant
        self.bundle_digest = push_bundle(api)
        self.bundle_task_id = uuid7()
        api.sql("INSERT INTO tasks (id, project_id, name, log_retention_s, labels,"
                " bundle_digest, entry_point) VALUES (%(t)s, %(p)s, 'fuzz-bundle', 0, %(l)s,"
                " %(d)s, 'run.sh')",
                {"t": self.bundle_task_id, "p": api.ctx.project_id,
                 "l": json.dumps(POOL_LABELS), "d": self.bundle_digest})

    def incarnation(self) -> str:
        return register_incarnation(
            self.api.engine, self.config, pool_id=self.pool_id, pool_labels=POOL_LABELS,
            registration=wire.WorkerRegistration("fuzz-w", dict(POOL_LABELS), 2)
        ).incarnation_id

    def queued_run(self, task_id: str | None = None) -> None:
        self.api.sql("INSERT INTO runs (id, project_id, task_id, owner, status, trigger)"
                     " VALUES (%(r)s, %(p)s, %(t)s, 'runtime', 'queued', 'manual')",
                     {"r": uuid7(), "p": self.api.ctx.project_id,
                      "t": task_id or self.task_id})

    def canonical(self, path: str) -> dict[str, Any]:
        """A valid body for ``path`` on freshly seeded objects (a live lease for the lease
        writes, claimed now; a queued run for a claim)."""
        _, _, leased = WORKER_OPS[path]
        if path == "/v1/worker/register":
            return {"name": "fuzz-w", "labels": dict(POOL_LABELS), "concurrency": 2}
        inc = self.incarnation()
        if path in ("/v1/worker/claim", "/v1/worker/stopped"):
            if path.endswith("/claim"):
                self.queued_run()
                return {"incarnation_id": inc, "max_attempts": 1}
            return {"incarnation_id": inc}
        assert leased
        if path == "/v1/worker/bundle":  # a live lease on an attempt running the bundle
            # every older claimable run first (the seeding of the other operations queues
            # many more than one claim takes), so the next claim is the bundle task's
            while claim_attempts(self.api.engine, self.config, pool_id=self.pool_id,
                                 request=wire.ClaimRequest(inc, wire.MAX_CLAIM)).attempts:
                pass
            self.queued_run(self.bundle_task_id)
            (attempt,) = claim_attempts(self.api.engine, self.config, pool_id=self.pool_id,
                                        request=wire.ClaimRequest(inc, 1)).attempts
            return {"lease": attempt.lease.to_json(), "digest": self.bundle_digest}
        self.queued_run()
        (attempt,) = claim_attempts(self.api.engine, self.config, pool_id=self.pool_id,
                                    request=wire.ClaimRequest(inc, 1)).attempts
        lease = attempt.lease.to_json()
        return {
            "/v1/worker/started": {"lease": lease, "pid": 4242},
            "/v1/worker/heartbeat": {"lease": lease},
            "/v1/worker/log-upload": {"lease": lease, "log": {"sha256": "0" * 64,
                                                              "size_bytes": 3}},
            "/v1/worker/complete": {"lease": lease, "outcome": "failed", "exit_code": 1,
                                    "signal": None, "log": None},
            "/v1/worker/complete-no-output": {"lease": lease, "outcome": "succeeded",
                                              "exit_code": 0, "signal": None, "log": None},
            "/v1/worker/log-chunk": {"chunks": [{"lease": lease, "offset": 0, "data": "aGkK",
                                                 "skipped": False}]},
        }[path]


def aimed_body(path: str, generated: Any, canonical: dict[str, Any]) -> dict[str, Any]:
    """``canonical`` with each generated field the wire type accepts put back, except the
    fields the seeding decides (fences, the pool's labels, a completion's log)."""
    kind, decided, _ = WORKER_OPS[path]
    body = dict(canonical)
    if not isinstance(generated, dict):
        return body
    for key, value in generated.items():
        if key in decided or key not in canonical:
            continue
        trial = {**body, key: value}
        try:
            kind.from_json(trial)
        except wire.WireFormatError:
            continue
        body = trial
    return body


def fuzz_one(api: ApiWorld, workers: WorkerSeed, operation: Any,
             statuses: dict[tuple[str, str], set[int]],
             server_errors: list[tuple[str, str, int, str]], log_attempt: str,
             examples: int) -> None:
    """Generated cases of one operation, recording statuses and forbidden 5xx answers."""
    key = (operation.method.upper(), operation.path)
    worker = operation.path.startswith(WORKER)
    headers = api.as_("worker" if worker else "admin")

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck),
              phases=[Phase.explicit, Phase.generate])
    @given(case=operation.as_strategy(), aim=st.booleans())
    def check(case: Any, aim: bool) -> None:
        if worker:
            if aim:
                case.body = aimed_body(operation.path, case.body,
                                       workers.canonical(operation.path))
        elif aim:  # only an aimed case uses the seeded objects: the others keep their own
            objects = seed(api, log_attempt)
            if key == LOG_READ:
                objects["attempt_id"] = objects["log_attempt"]
            if key == PUSH:
                case.body = tiny_bundle()
            if key == ("POST", "/v1/notify/channels"):
                case.body = {"url": CHANNEL_URL}
            if case.path_parameters:
                case.path_parameters = {k: objects.get(k, v)
                                        for k, v in case.path_parameters.items()}
            if case.query:  # GET /v1/runs/resolve?ref=: the seeded run's id
                case.query = {k: objects.get(k, v) for k, v in case.query.items()}
        response = case.call(headers=headers)
        statuses[key].add(response.status_code)
        if response.status_code >= 500 and not (
                key == LOG_READ and response.status_code == 503):
            server_errors.append((*key, response.status_code, response.text[:200]))

    check()


def test_fuzzed_from_openapi_no_5xx_and_every_operation_2xx(
        pg_db: PgDb, s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    api = open_world(pg_db, s3=s3, bucket=bucket)
    try:
        with pg_db.sa() as conn:
            (log,) = seed_logs(conn, direct_s3, bucket, 1)
        fuzz_all(api, log.attempt_id, EXAMPLES)
    finally:
        close_world(api)


def fuzz_all(api: ApiWorld, log_attempt: str, examples: int) -> None:
    """Every operation of the served document; asserts the issue's two conditions."""
    schema = schemathesis.openapi.from_url(f"{api.client.base_url}/openapi.json")
    statuses: dict[tuple[str, str], set[int]] = defaultdict(set)
    server_errors: list[tuple[str, str, int, str]] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    workers = WorkerSeed(api)
    assert {op.path for op in operations if op.path.startswith(WORKER)} == set(WORKER_OPS)
    for operation in operations:
        fuzz_one(api, workers, operation, statuses, server_errors, log_attempt, examples)
    print({f"{m} {p}": sorted(s) for (m, p), s in sorted(statuses.items())})
    assert server_errors == []
    unreached = sorted(k for k in statuses if not any(200 <= s < 300 for s in statuses[k]))
    assert unreached == [], {k: statuses[k] for k in unreached}
    assert len(statuses) == len(operations)
