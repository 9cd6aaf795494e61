"""Cluster history pruning deletes old history in bounded batches and keeps what it must
(docs/operations.md "History pruning"): each task's newest runs, runs under a live lease, runs
whose log artifact has no tombstone, and the run rows of tombstoned runs; never token rows."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_control_db import PgDb

from qinglong.control.db.engine import create_engine
from qinglong.control.history.prune import PacedPruner, prune_batch
from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")
PROJECT = "00000000-0000-7000-8000-0000000000aa"


def _task(conn: psycopg.Connection[Any], override_s: int | None = None) -> str:
    task = uuid7()
    conn.execute("INSERT INTO tasks (id, project_id, name, log_retention_s,"
                 " history_retention_s) VALUES (%s, %s, %s, 0, %s)",
                 (task, PROJECT, "任务-" + task[-6:], override_s))
    return task


def _run(conn: psycopg.Connection[Any], task: str, *, days_ago: float, status: str = "succeeded",
         artifact: bool = False, tombstone: bool = False, attempt_status: str = "succeeded",
         lease_live: bool = False) -> str:
    run, attempt = uuid7(), uuid7()
    finished = None if status == "running" else f"{days_ago} days"
    conn.execute("INSERT INTO runs (id, project_id, task_id, owner, status, finished_at)"
                 " VALUES (%s, %s, %s, 'runtime', %s, now() - %s::interval)",
                 (run, PROJECT, task, status, finished))
    conn.execute("INSERT INTO attempts (id, run_id, number, executor, status, finished_at,"
                 " lease_expires_at) VALUES (%s, %s, 1, 'remote_worker', %s,"
                 " now() - %s::interval, CASE WHEN %s THEN now() + interval '1 hour' END)",
                 (attempt, run, attempt_status, finished, lease_live))
    conn.execute("INSERT INTO events (id, run_id, attempt_id, kind, to_status)"
                 " VALUES (%s, %s, %s, 'run', %s)", (uuid7(), run, attempt, status))
    conn.execute("INSERT INTO occurrences (id, task_id, outcome, first_slot, last_slot, run_id)"
                 " VALUES (%s, %s, 'run_created', now() - %s::interval,"
                 " now() - %s::interval, %s)",
                 (uuid7(), task, f"{days_ago} days", f"{days_ago} days", run))
    if artifact:
        conn.execute("INSERT INTO run_attempt_log_artifacts (id, attempt_id, project_id,"
                     " run_id, bucket, object_key, size_bytes, sha256, content_type, metadata)"
                     " VALUES (%s, %s, %s, %s, 'logs', %s, 1, repeat('a', 64), 'text/plain',"
                     " '{}')", (f"wlog-{attempt}", attempt, PROJECT, run, f"k/{attempt}"))
    if tombstone:
        conn.execute("INSERT INTO run_attempt_log_artifact_tombstones (attempt_id, project_id,"
                     " run_id, artifact_id, outcome, retired_at, evidence, evidence_sha256)"
                     " VALUES (%s, %s, %s, %s, 'deleted', now(), '{}', repeat('d', 64))",
                     (attempt, PROJECT, run, f"wlog-{attempt}"))
    return run


def _width(line: str) -> int:
    """Terminal columns: wide (CJK) characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)


def _left(conn: psycopg.Connection[Any], run: str) -> tuple[int, int, int, int]:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM runs WHERE id = %(r)s),"
        " (SELECT count(*) FROM attempts WHERE run_id = %(r)s),"
        " (SELECT count(*) FROM events WHERE run_id = %(r)s),"
        " (SELECT count(*) FROM occurrences WHERE run_id = %(r)s)", {"r": run}).fetchone()
    assert row is not None
    return row


def _prune_all(db: PgDb, limit: int) -> list[Any]:
    batches = []
    with db.pooled(db.runtime_url) as engine:  # as the runtime role: its grants suffice
        for _ in range(50):
            batch = prune_batch(engine, "replica-一", limit=limit)
            assert batch is not None
            batches.append(batch)
            if batch.scanned < limit:
                break
    return batches


def test_pruning_keeps_the_newest_runs_of_each_task_and_deletes_the_rest(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        conn.execute("INSERT INTO api_tokens (id, name, token_sha256, scope, revoked_at)"
                     " VALUES (%s, '旧令牌', repeat('c', 64), 'admin', now() - interval"
                     " '400 days')", (uuid7(),))
        task = _task(conn)
        runs = [_run(conn, task, days_ago=200 - i) for i in range(25)]  # oldest first
        young = _task(conn)
        recent = [_run(conn, young, days_ago=10) for _ in range(25)]
    batches = _prune_all(pg_db, limit=7)  # several batches: the cursor moves between them
    with pg_db.connect() as conn:
        assert [_left(conn, r) for r in runs[:5]] == [(0, 0, 0, 0)] * 5
        assert [_left(conn, r) for r in runs[5:]] == [(1, 1, 1, 1)] * 20
        assert [_left(conn, r) for r in recent] == [(1, 1, 1, 1)] * 25
        tokens = conn.execute("SELECT count(*) FROM api_tokens").fetchone()
    assert tokens == (1,)
    assert sum(b.runs for b in batches) == 5 and sum(b.events for b in batches) == 5
    assert len(batches) >= 4


def test_pruning_keeps_leased_unretired_and_tombstoned_runs(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        conn.execute("UPDATE history_prune_jobs SET keep_runs = 0")
        task = _task(conn)
        plain = _run(conn, task, days_ago=100)
        unretired = _run(conn, task, days_ago=100, artifact=True)
        retired = _run(conn, task, days_ago=100, artifact=True, tombstone=True)
        lost_leased = _run(conn, task, days_ago=100, status="lost", attempt_status="lost",
                           lease_live=True)
        young = _run(conn, task, days_ago=30)
        short = _task(conn, override_s=86400)  # a one-day override on another task
        short_run = _run(conn, short, days_ago=2)
        long_ = _task(conn, override_s=400 * 86400)
        long_run = _run(conn, long_, days_ago=200)
    _prune_all(pg_db, limit=3)
    with pg_db.connect() as conn:
        assert _left(conn, plain) == (0, 0, 0, 0)
        assert _left(conn, unretired) == (1, 1, 1, 1)
        assert _left(conn, retired) == (1, 1, 0, 0)  # tombstone keeps run and attempt
        assert _left(conn, lost_leased) == (1, 1, 1, 1)
        assert _left(conn, young) == (1, 1, 1, 1)
        assert _left(conn, short_run) == (0, 0, 0, 0)
        assert _left(conn, long_run) == (1, 1, 1, 1)
        left = conn.execute("SELECT count(*) FROM run_attempt_log_artifact_tombstones"
                            ).fetchone()
    assert left == (1,)


def test_a_second_replica_skips_the_job_another_holds(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        conn.execute("UPDATE history_prune_jobs SET keep_runs = 0")
        run = _run(conn, _task(conn), days_ago=100)
    with pg_db.connect() as holder, pg_db.pooled(pg_db.runtime_url) as engine:
        with holder.transaction():
            holder.execute("SELECT 1 FROM history_prune_jobs FOR UPDATE")
            assert prune_batch(engine, "replica-二") is None
            with pg_db.connect() as conn:
                assert _left(conn, run) == (1, 1, 1, 1)
        batch = prune_batch(engine, "replica-二")
    assert batch is not None and batch.runs == 1


def test_a_batch_skips_a_run_another_session_holds_and_a_later_pass_prunes_it(
        pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        conn.execute("UPDATE history_prune_jobs SET keep_runs = 0")
        task = _task(conn)
        free, held = _run(conn, task, days_ago=101), _run(conn, task, days_ago=100)
    # a lock wait would end the batch with LockNotAvailable instead of hanging the test
    engine = create_engine(pg_db.runtime_url, pool_size=1, max_overflow=0,
                           lock_timeout_ms=5000)
    try:
        with pg_db.connect() as holder, holder.transaction():
            # what an event insert's foreign-key check holds on its run
            holder.execute("SELECT 1 FROM runs WHERE id = %s FOR KEY SHARE", (held,))
            first = prune_batch(engine, "replica-一")
            with pg_db.connect() as conn:
                assert _left(conn, free) == (0, 0, 0, 0)
                assert _left(conn, held) == (1, 1, 1, 1)
        later = prune_batch(engine, "replica-一")  # the walk ended: a new pass from the oldest
    finally:
        engine.dispose()
    assert first is not None and (first.scanned, first.runs) == (2, 1)
    assert later is not None and later.runs == 1
    with pg_db.connect() as conn:
        assert _left(conn, held) == (0, 0, 0, 0)


def test_a_paced_pruner_rests_after_a_full_batch_only(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        conn.execute("UPDATE history_prune_jobs SET keep_runs = 0")
        task = _task(conn)
        runs = [_run(conn, task, days_ago=100 + i) for i in range(3)]
    with pg_db.pooled(pg_db.runtime_url) as engine:
        pruner = PacedPruner(engine, "replica-一", limit=2, duty=0.5)
        pruner.request_stop()  # a stopped pruner counts the rest it would take, not waiting
        full = pruner.tick()
        assert full is not None and full.full and pruner.rested_s > 0
        rested = pruner.rested_s
        last = pruner.tick()
        assert last is not None and not last.full and pruner.rested_s == rested
        idle = PacedPruner(engine, "replica-一", limit=2, duty=1.0)
        idle.request_stop()
        assert idle.tick() is not None and idle.rested_s == 0
    with pg_db.connect() as conn:
        assert [_left(conn, r) for r in runs] == [(0, 0, 0, 0)] * 3


def test_history_status_shows_what_is_due_and_the_last_batch(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        conn.execute("UPDATE history_prune_jobs SET keep_runs = 0")
        task = _task(conn)
        for _ in range(3):
            _run(conn, task, days_ago=100)
    env = {"QL3_DATABASE_URL": pg_db.url, "PATH": "/usr/bin:/bin", "COLUMNS": "80"}
    before = subprocess.run([QL3, "control", "history", "status"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert before.returncode == 0, before.stderr
    assert "待清理" in before.stdout and " 3" in before.stdout
    assert all(_width(line) <= 80 for line in before.stdout.splitlines())
    _prune_all(pg_db, limit=2)
    after = subprocess.run([QL3, "control", "history", "status", "--json"], env=env,
                           capture_output=True, text=True, timeout=60, check=False)
    assert after.returncode == 0, after.stderr
    doc = json.loads(after.stdout)
    assert doc["past_horizon"] == 0 and doc["total_runs"] == 3
    assert doc["last_batch"]["owner"] == "replica-一"


def test_one_pass_of_the_serve_clears_a_backlog_past_the_old_hourly_cap(pg_db: PgDb) -> None:
    # 4,500 due runs of one task: more than the 40 batches of 100 a wake-up used to allow
    backlog = 4_520
    key = "('00000000-0000-7000-8{k}-' || lpad(to_hex(g), 12, '0'))::uuid"
    with pg_db.connect() as conn:
        conn.execute("INSERT INTO api_tokens (id, name, token_sha256, scope, revoked_at)"
                     " VALUES (%s, '旧令牌', repeat('c', 64), 'admin', now() - interval"
                     " '400 days')", (uuid7(),))
        bulk = _task(conn)
        run, attempt = key.format(k="001"), key.format(k="002")
        for statement in (
                f"INSERT INTO runs (id, project_id, task_id, owner, status, finished_at)"
                f" SELECT {run}, %(p)s, %(t)s, 'runtime', 'succeeded',"
                f" now() - interval '200 days' + g * interval '1 minute'"
                f" FROM generate_series(1, %(n)s) g",
                f"INSERT INTO attempts (id, run_id, number, executor, status, finished_at)"
                f" SELECT {attempt}, {run}, 1, 'remote_worker', 'succeeded',"
                f" now() - interval '150 days' FROM generate_series(1, %(n)s) g",
                f"INSERT INTO events (id, run_id, attempt_id, kind, to_status)"
                f" SELECT {key.format(k='003')}, {run}, {attempt}, 'run', 'succeeded'"
                f" FROM generate_series(1, %(n)s) g"):
            conn.execute(statement.encode(), {"p": PROJECT, "t": bulk, "n": backlog})
        task = _task(conn)
        plain = _run(conn, task, days_ago=100)
        unretired = _run(conn, task, days_ago=100, artifact=True)
        retired = _run(conn, task, days_ago=100, artifact=True, tombstone=True)
        leased = _run(conn, task, days_ago=100, status="lost", attempt_status="lost",
                      lease_live=True)
        newest = [_run(conn, task, days_ago=10) for _ in range(20)]
    from qinglong.control.serve.replica import history_prune_service

    with pg_db.pooled(pg_db.runtime_url) as engine:
        # duty 1: the rests are the unit tests' (tests/control/test_history_pacing.py)
        service = history_prune_service(PacedPruner(engine, "replica-一", duty=1.0))
        done = service.run_once()  # one wake-up of the serve's history_prune
    assert done is not None and done.caught_up and not done.held
    assert done.batches > 40 and done.runs == backlog - 20 + 1
    with pg_db.connect() as conn:
        left = conn.execute("SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM"
                            " events e WHERE e.run_id = r.id)) FROM runs r"
                            " WHERE task_id = %s", (bulk,)).fetchone()
        assert left == (20, 20)  # the task's newest 20, with their events
        assert _left(conn, plain) == (0, 0, 0, 0)
        assert _left(conn, unretired) == (1, 1, 1, 1)
        assert _left(conn, retired) == (1, 1, 0, 0)
        assert _left(conn, leased) == (1, 1, 1, 1)
        assert [_left(conn, r) for r in newest] == [(1, 1, 1, 1)] * 20
        tokens = conn.execute("SELECT count(*) FROM api_tokens").fetchone()
        tombstones = conn.execute("SELECT count(*) FROM run_attempt_log_artifact_tombstones"
                                  ).fetchone()
    assert tokens == (1,) and tombstones == (1,)
