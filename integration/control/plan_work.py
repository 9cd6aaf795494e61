"""What a statement's plan did, measured as work (rows read, shared buffers), not time.

The claim-shaped statements of the cluster (retention claim and finalize, dispatch
``pick_runs``, the scheduler's due page, recovery's expired-lease scan) must cost the same
whatever their tables hold, with and without planner statistics (docs/protocols.md §4.3,
ADR-0379 §4: bounded claims). ``seed`` writes a control plane of ``n`` rows per kind in one
``INSERT … SELECT generate_series`` per table, on tables whose autovacuum (and so
autoanalyze) is off; ``explain_work`` runs one statement under ``EXPLAIN (ANALYZE, BUFFERS,
FORMAT JSON)`` in a transaction it rolls back and sums what the plan nodes read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import psycopg
import psycopg.errors
from psycopg import sql

# The control plane's tables: autovacuum off (no autoanalyze can give the planner statistics)
# before any row is written.
TABLES = ("tasks", "runs", "attempts", "events", "run_attempt_log_artifacts",
          "run_attempt_log_retention_controls", "run_attempt_log_artifact_tombstones",
          "worker_pools", "worker_incarnations")

PROJECT = "00000000-0000-7000-8000-0000000000aa"
POOL = "00000000-0000-7000-8000-0000000000bb"
INCARNATION = "00000000-0000-7000-8000-0000000000cc"


def key(kind: int, n: int | str) -> str:
    """SQL for a sequential UUID (``kind`` 1..15 keeps the kinds apart; ``n`` an integer or a
    SQL expression): sequential keys are appended to the btrees, which keeps seeding fast."""
    return (f"('00000000-0000-7000-8{kind:03x}-' || lpad(to_hex({n}), 12, '0'))::uuid")


# {lo} < g <= {hi}: one INSERT … SELECT per table. Task g: runnable (argv), due to fire.
# Retention (kind 2/3): a succeeded run and its remote attempt with a log artifact and a due
# control. Dispatch (kind 4): a queued run of task g. Recovery (kind 5/6): a running run whose
# attempt's lease expired.
_SEED = f"""
INSERT INTO tasks (id, project_id, name, log_retention_s, argv, schedule, next_fire_at)
  SELECT {key(1, 'g')}, '{PROJECT}'::uuid, 't' || g, 0, '["true"]', '* * * * *',
         now() - interval '1 hour' + g * interval '1 microsecond'
  FROM generate_series({{lo}} + 1, {{hi}}) g;
INSERT INTO runs (id, project_id, task_id, owner, status, finished_at, not_before)
  SELECT {key(2, 'g')}, '{PROJECT}'::uuid, {key(1, 'g')}, 'runtime', 'succeeded',
         now() - interval '1 day', now() - interval '1 day'
  FROM generate_series({{lo}} + 1, {{hi}}) g
  UNION ALL
  SELECT {key(4, 'g')}, '{PROJECT}'::uuid, {key(1, 'g')}, 'runtime', 'queued', NULL,
         now() - interval '1 hour' + g * interval '1 microsecond'
  FROM generate_series({{lo}} + 1, {{hi}}) g
  UNION ALL
  SELECT {key(5, 'g')}, '{PROJECT}'::uuid, {key(1, 'g')}, 'runtime', 'running', NULL,
         now() - interval '1 day'
  FROM generate_series({{lo}} + 1, {{hi}}) g;
INSERT INTO attempts (id, run_id, number, executor, status, finished_at, lease_token,
                      lease_version, lease_expires_at, worker_incarnation_id)
  SELECT {key(3, 'g')}, {key(2, 'g')}, 1, 'remote_worker', 'succeeded',
         now() - interval '1 day', NULL, 0, NULL, NULL
  FROM generate_series({{lo}} + 1, {{hi}}) g
  UNION ALL
  SELECT {key(6, 'g')}, {key(5, 'g')}, 1, 'remote_worker', 'running', NULL,
         gen_random_uuid(), 1, now() - interval '1 hour' + g * interval '1 microsecond',
         '{INCARNATION}'::uuid
  FROM generate_series({{lo}} + 1, {{hi}}) g;
INSERT INTO run_attempt_log_artifacts (id, attempt_id, project_id, run_id, bucket, object_key,
    size_bytes, sha256, content_type, metadata)
  SELECT 'wlog-' || {key(3, 'g')}, {key(3, 'g')}, '{PROJECT}'::uuid, {key(2, 'g')}, 'logs',
         'k/' || g, 1, repeat('b', 64), 'text/plain', '{{{{}}}}'
  FROM generate_series({{lo}} + 1, {{hi}}) g;
INSERT INTO run_attempt_log_retention_controls (attempt_id, project_id, run_id, artifact_id,
    bucket, object_key, size_bytes, sha256, content_type, eligible_at, due_at)
  SELECT {key(3, 'g')}, '{PROJECT}'::uuid, {key(2, 'g')}, 'wlog-' || {key(3, 'g')}, 'logs',
         'k/' || g, 1, repeat('b', 64), 'text/plain', now() - interval '1 day',
         now() - interval '1 day' + g * interval '1 microsecond'
  FROM generate_series({{lo}} + 1, {{hi}}) g;
"""


def prepare(conn: psycopg.Connection[Any]) -> None:
    """Turn autovacuum (hence autoanalyze) off on ``TABLES`` and add the worker pool and
    incarnation ``pick_runs`` claims for. Call on a fresh database before ``seed``."""
    for table in TABLES:
        conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    conn.execute("INSERT INTO worker_pools (id, name) VALUES (%s, 'p')", (POOL,))
    conn.execute("INSERT INTO worker_incarnations (id, pool_id, name, concurrency)"
                 " VALUES (%s, %s, 'w', 4)", (INCARNATION, POOL))


def seed(conn: psycopg.Connection[Any], lo: int, hi: int) -> None:
    """Rows ``lo < g <= hi`` of every kind (see ``_SEED``), in one transaction, foreign-key
    triggers skipped (setup only: the rows are consistent by construction)."""
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(_SEED.format(lo=int(lo), hi=int(hi)).encode())


def never_analyzed(conn: psycopg.Connection[Any]) -> bool:
    """True when no table of ``TABLES`` was ever analyzed (by hand or by autovacuum) and
    the planner holds no column statistics for them."""
    row = conn.execute(
        "SELECT bool_and(last_analyze IS NULL AND last_autoanalyze IS NULL"
        "                AND analyze_count = 0 AND autoanalyze_count = 0),"
        "       (SELECT count(*) FROM pg_stats WHERE schemaname = 'public'"
        "                                       AND tablename = ANY(%(t)s))"
        " FROM pg_stat_user_tables WHERE relname = ANY(%(t)s)", {"t": list(TABLES)}).fetchone()
    assert row is not None
    return bool(row[0]) and row[1] == 0


@dataclass(frozen=True)
class Work:
    """One execution's work: ``rows`` read over all plan nodes (rows each node produced
    plus rows its filters and join filters removed, times its loops) and ``buffers``, the
    shared blocks the statement touched (hit + read, 8 KiB each). ``plan`` is the JSON plan."""

    rows: int
    buffers: int
    plan: dict[str, Any]

    def within(self, other: Work, factor: float) -> bool:
        """True when both measures are at most ``factor`` × ``other``'s."""
        return self.rows <= factor * other.rows and self.buffers <= factor * other.buffers


_REMOVED = ("Rows Removed by Filter", "Rows Removed by Join Filter",
            "Rows Removed by Index Recheck")


def _rows(node: dict[str, Any]) -> float:
    # EXPLAIN reports rows and removed rows per loop: times the loops, summed over the tree
    loops = float(node.get("Actual Loops", 1))
    own = float(node.get("Actual Rows", 0)) + sum(float(node.get(k, 0)) for k in _REMOVED)
    return own * loops + sum(_rows(child) for child in node.get("Plans", ()))


STATEMENT_TIMEOUT_MS = 20_000
# What a statement cancelled by the timeout counts as: more work than any bounded one.
UNBOUNDED = 1 << 62


def _generic(statement: str, params: dict[str, Any]) -> tuple[bytes, sql.Composed]:
    """``PREPARE`` text of ``statement`` (``%(name)s`` turned into ``$n``) and the
    ``EXECUTE`` of it with ``params`` as literals."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, statement)
    args = sql.SQL(", ").join(sql.Literal(params[name]) for name in names)
    return (f"PREPARE work_q AS {text}".encode(),
            sql.SQL("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE work_q({})").format(args))


def explain_work(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any],
                 *, before: str | None = None, generic: bool = False) -> Work:
    """Run ``statement`` (``%(name)s`` placeholders, as in the ``queries.sql`` files) once
    under ``EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)`` on ``conn`` (autocommit) in a
    transaction that is rolled back, so a claim changes nothing; returns its Work.

    ``before``: a parameterless statement the caller runs first in the same transaction
    (a plan pin, ``SET LOCAL``-style). ``generic``: run it as a prepared statement under
    its generic plan (psycopg prepares a statement after its fifth run on a connection, and
    PostgreSQL may then keep a generic plan). A statement still running after
    ``STATEMENT_TIMEOUT_MS`` is cancelled and counts ``UNBOUNDED`` rows and buffers."""
    with conn.transaction(force_rollback=True):
        conn.execute(f"SET LOCAL statement_timeout = {STATEMENT_TIMEOUT_MS}")
        if before is not None:
            conn.execute(before.encode())
        try:
            with conn.transaction():  # a savepoint: the cancel leaves the outer one usable
                if generic:
                    conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                    prepare_q, execute_q = _generic(statement, params)
                    conn.execute(prepare_q)
                    row = conn.execute(execute_q).fetchone()
                else:
                    row = conn.execute(
                        ("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement).encode(),
                        params).fetchone()
        except psycopg.errors.QueryCanceled:
            return Work(UNBOUNDED, UNBOUNDED,
                        {"Node Type": f"cancelled after {STATEMENT_TIMEOUT_MS} ms"})
        finally:
            if generic:  # a prepared statement outlives the rollback of its transaction
                conn.execute("DEALLOCATE ALL")
    assert row is not None
    doc = row[0] if isinstance(row[0], list) else json.loads(row[0])
    plan = doc[0]["Plan"]
    return Work(round(_rows(plan)),
                int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0)),
                plan)


def outline(plan: dict[str, Any], depth: int = 0) -> str:
    """The plan as indented ``node (rows × loops)`` lines: for a failing assertion."""
    name = " ".join(str(plan[k]) for k in ("Node Type", "Relation Name", "Index Name")
                    if k in plan)
    line = (f"{'  ' * depth}{name} rows={plan.get('Actual Rows')} "
            f"loops={plan.get('Actual Loops')}")
    removed = [f"{k.split()[-1]}-={plan[k]}" for k in _REMOVED if plan.get(k)]
    return "\n".join([line + (" " + " ".join(removed) if removed else ""),
                      *(outline(c, depth + 1) for c in plan.get("Plans", ()))])

