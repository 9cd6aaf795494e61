"""Claim(16) + finalize, reported: rows/s, round trips and server time per row (no S3).

ours:     N processes, each with its own engine of ``db/engine.py`` (SQLAlchemy over psycopg
          3, READ COMMITTED, as the runtime role), looping ``claims.claim(limit=16)`` then
          ``finalize.finalize`` per claimed row (outcome ``deleted``), exactly as a sweep does
          minus the S3 calls. The sessions start their timed windows together, after every
          process has imported and connected (a barrier). Round trips are counted from the
          engine's events: each statement, BEGIN and COMMIT is one exchange with the server.
baseline: ``pgbench -M prepared -c N -j N -T DURATION -n`` running the same statements from
          ``retention/queries.sql``: [BEGIN; lock_control] then [retire_control; COMMIT] per
          row, each pair pipelined, and BEGIN | claim | COMMIT (the claim wrapped, unchanged,
          in an outer CTE that hands the claimed ids and versions on through ``\\gset``). It
          is the floor of what these statements cost, for context; there is no target
          (issue 11 item 9 retired the hand-written libpq client and its ratio).
server:   ``pg_stat_database.active_time`` of the run's own database (milliseconds spent
          executing statements; every run gets a fresh clone) per row retired.
client CPU: user + system CPU seconds of the client processes over the run, per row (µs).

no ANALYZE: ours again on a clone of a second template holding NOSTATS_ROWS due controls
          that was never analyzed, its tables' autovacuum (hence autoanalyze) off: a
          restore, a bulk enrollment or a new replica's first minutes. The claim must stay
          as fast as on the analyzed template (docs/protocols.md §4.3); those runs last at
          most NOSTATS_SECONDS so they never run out of due rows.

Each configuration runs on a fresh clone of one seeded database, interleaved per session
count, for ROUNDS rounds; medians are printed.
Usage: python bench/claims.py [SECONDS_PER_RUN (8)] [ROUNDS (3)]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration" / "control"))

from pg_control_db import seed_bulk

from bench_support import admin, cloned_database, db_url, migrated_database, role_url

PGBENCH = shutil.which("pgbench") or "/usr/lib/postgresql/15/bin/pgbench"
SESSIONS = (1, 2, 4)
LIMIT = 16
LEASE_S = 60.0
ROWS = 160_000  # > 13k rows/s × the longest run: no session may run out of due rows
NOSTATS_ROWS = 100_000  # the never-analyzed template (docs/protocols.md §4.3)
NOSTATS_SECONDS = 4  # × 13k rows/s < NOSTATS_ROWS
# the tables a claim and finalize read: autovacuum off on the never-analyzed template
NOSTATS_TABLES = ("tasks", "runs", "attempts", "run_attempt_log_artifacts",
                  "run_attempt_log_retention_controls", "run_attempt_log_artifact_tombstones")


# claim columns handed to the finalize blocks (pgbench variable prefix, RETURNING column)
_HANDED = {"a": "attempt_id", "v": "claim_version", "p": "project_id", "r": "run_id",
           "f": "artifact_id"}


def pgbench_script(path: Path) -> None:
    """Write the pgbench script: the claim and finalize statements of queries.sql verbatim,
    with ``%(name)s`` turned into pgbench's ``:name``, in ours' round trips: BEGIN | claim_plan
    | claim | COMMIT, then per row [BEGIN; lock_control] and [retire_control; COMMIT] pipelined.
    pgbench cannot ``\\gset`` inside a pipeline, so retire_control takes the claim's values
    (what the locked row holds when the fence holds) and a fixed ``retired_at``."""
    from qinglong.control.retention.claims import queries

    q = {k: re.sub(r"%\((\w+)\)s", r":\1", v) for k, v in queries().items()}
    handed = ", ".join(f"{col}s[{i}] AS {var}{i}" for var, col in _HANDED.items()
                       for i in range(1, LIMIT + 1))
    arrays = ", ".join(f"array_agg({col}) AS {col}s" for col in _HANDED.values())
    claim_sql = " ".join(q["claim"].split())  # pgbench: one SQL command per line
    lines = ["BEGIN;", " ".join(q["claim_plan"].split()) + ";",  # as claims.claim() does
             f"WITH claimed AS ({claim_sql}) SELECT {handed}"
             f" FROM (SELECT {arrays} FROM claimed WHERE leased) s",
             "\\gset", "COMMIT;"]
    for i in range(1, LIMIT + 1):
        lock = " ".join(q["lock_control"].split()).replace(":attempt_id", f":a{i}")
        retire = " ".join(q["retire_control"].split())
        for var, col in _HANDED.items():
            retire = retire.replace(f":{col}", f":{var}{i}")
        retire = retire.replace(":evidence_sha256", ":digest")
        lines += ["\\startpipeline", "BEGIN;", lock + ";", "\\endpipeline",
                  "\\startpipeline", retire + ";", "COMMIT;", "\\endpipeline"]
    path.write_text("\n".join(lines) + "\n")


EVIDENCE = "x" * 560  # pgbench's evidence: the usual length, fixed
DIGEST = "0" * 64
RETIRED_AT = "2026-01-01T00:00:00+00:00"


class Run(NamedTuple):
    """One timed run: rows retired per second, client CPU (user + system) per row in µs,
    round trips per row (NaN: not counted, pgbench) and server active time per row in µs."""

    rows_per_s: float
    client_us_per_row: float
    round_trips_per_row: float
    server_us_per_row: float


def never_analyzed(db: str) -> bool:
    """True when no table of ``NOSTATS_TABLES`` in ``db`` was analyzed (by hand or by
    autovacuum) and the planner holds no column statistics for them."""
    import psycopg

    with psycopg.connect(db_url(db), autocommit=True) as conn:
        row = conn.execute(
            "SELECT bool_and(analyze_count = 0 AND autoanalyze_count = 0),"
            " (SELECT count(*) FROM pg_stats WHERE tablename = ANY(%(t)s))"
            " FROM pg_stat_user_tables WHERE relname = ANY(%(t)s)",
            {"t": list(NOSTATS_TABLES)}).fetchone()
    return row is not None and bool(row[0]) and row[1] == 0


def server_active_ms(db: str) -> float:
    """``pg_stat_database.active_time`` of ``db`` in milliseconds (flushed by sessions that
    ended; read after the run's clients exit)."""
    import psycopg

    with psycopg.connect(db_url("postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT active_time FROM pg_stat_database WHERE datname = %s",
                           (db,)).fetchone()
    return float(row[0]) if row and row[0] is not None else float("nan")


def run_pgbench(db: str, role: str, sessions: int, seconds: int, script: Path) -> Run:
    """pgbench on ``db``: its tps (excluding connection time) × rows per cycle, and its CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    active0 = server_active_ms(db)
    env = dict(os.environ, PGOPTIONS=f"-c role={role}")
    out = subprocess.run(
        [PGBENCH, "-h", "127.0.0.1", "-U", "postgres", "-n", "-M", "prepared",
         "-c", str(sessions), "-j", str(sessions), "-T", str(seconds), "-f", str(script),
         "-D", "owner=pgbench/0", "-D", f"limit={LIMIT}", "-D", "versioned_only=false",
         "-D", f"lease_s={LEASE_S}",
         "-D", "outcome=deleted", "-D", f"evidence={EVIDENCE}", "-D", f"digest={DIGEST}",
         "-D", f"retired_at={RETIRED_AT}",
         db], capture_output=True, text=True, env=env, timeout=seconds + 60, check=False)
    tps = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
    done = re.search(r"number of transactions actually processed: (\d+)", out.stdout)
    if out.returncode != 0 or tps is None or done is None:
        raise RuntimeError(f"pgbench failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    import psycopg

    with psycopg.connect(db_url(db)) as conn:
        row = conn.execute("SELECT count(*) FROM run_attempt_log_artifact_tombstones").fetchone()
    rows = int(row[0]) if row else 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    server_ms = server_active_ms(db) - active0
    return Run(float(tps.group(1)) * rows / max(int(done.group(1)), 1),
               1e6 * cpu_s / max(rows, 1), float("nan"), 1e3 * server_ms / max(rows, 1))


def _cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return float(usage.ru_utime + usage.ru_stime)


def _session(url: str, index: int, ready: Any, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """One session of ours: claim+finalize for ``seconds`` once every session is ready;
    reports (rows, elapsed, cpu_s, round trips)."""
    from sqlalchemy import event

    from qinglong.control.db.engine import create_engine
    from qinglong.control.retention.claims import claim, process_owner
    from qinglong.control.retention.finalize import Outcome, finalize

    engine = create_engine(url, pool_size=1, max_overflow=0)
    trips = [0]

    def count(*_: Any, **__: Any) -> None:
        trips[0] += 1

    for name in ("before_cursor_execute", "begin", "commit", "rollback"):
        event.listen(engine, name, count)
    conn = engine.connect()
    owner = process_owner(f"bench-{index}")
    ready.wait(120)  # imported and connected: no start-up work inside anyone's timed window
    t0, cpu0, rows, trips[0] = time.perf_counter(), _cpu_s(), 0, 0
    end = t0 + seconds
    while time.perf_counter() < end:
        claims = claim(conn, owner, limit=LIMIT, lease_s=LEASE_S)
        if not claims:
            raise RuntimeError("ran out of due controls: raise ROWS")
        for c in claims:
            finalize(conn, c, Outcome.DELETED)
        rows += len(claims)
    out.put((rows, time.perf_counter() - t0, _cpu_s() - cpu0, trips[0]))
    conn.close()
    engine.dispose()


def run_ours(db: str, role: str, sessions: int, seconds: int) -> Run:
    """Rows/s summed over ``sessions`` processes (each rows / its own elapsed), their CPU,
    round trips and the server's active time per row."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    ready = ctx.Barrier(sessions + 1)  # all sessions start together, after start-up
    active0 = server_active_ms(db)
    procs = [ctx.Process(target=_session, args=(role_url(db, role), i, ready, seconds, out))
             for i in range(sessions)]
    for p in procs:
        p.start()
    ready.wait(120)
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(30)
    rows = sum(r[0] for r in results)
    server_ms = server_active_ms(db) - active0
    return Run(sum(r[0] / r[1] for r in results),
               1e6 * sum(r[2] for r in results) / max(rows, 1),
               sum(r[3] for r in results) / max(rows, 1), 1e3 * server_ms / max(rows, 1))


def main() -> None:
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if not Path(PGBENCH).exists():
        raise SystemExit(f"pgbench not found at {PGBENCH}")
    with tempfile.TemporaryDirectory() as tmp, migrated_database("ql3bench_claims") as (tmpl,
                                                                                       role):
        script = Path(tmp) / "claim_finalize.sql"
        pgbench_script(script)
        import psycopg

        with psycopg.connect(db_url(tmpl), autocommit=True) as conn:
            seed_bulk(conn, ROWS)
            conn.execute("VACUUM ANALYZE")
        with migrated_database("ql3bench_nostats") as (bare, bare_role):
            with psycopg.connect(db_url(bare), autocommit=True) as conn:
                for table in NOSTATS_TABLES:
                    conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
                seed_bulk(conn, NOSTATS_ROWS)
            runs: dict[str, dict[int, list[Run]]] = {
                kind: {n: [] for n in SESSIONS} for kind in ("pgbench", "ours", "nostats")}
            for _ in range(rounds):
                for n in SESSIONS:  # interleaved, so drift hits all alike
                    with cloned_database(tmpl) as db:
                        runs["pgbench"][n].append(run_pgbench(db, role, n, seconds, script))
                    with cloned_database(tmpl) as db:
                        runs["ours"][n].append(run_ours(db, role, n, seconds))
                    with cloned_database(bare) as db:
                        runs["nostats"][n].append(run_ours(db, bare_role, n,
                                                           min(seconds, NOSTATS_SECONDS)))
                        assert never_analyzed(db), "the no-ANALYZE clone was analyzed"
        with admin() as conn:
            version = conn.execute("SHOW server_version").fetchone()
    print(f"PostgreSQL {version[0] if version else '?'}; {ROWS} due controls per run "
          f"(analyzed), {NOSTATS_ROWS} never analyzed; {seconds} s per run "
          f"({min(seconds, NOSTATS_SECONDS)} s without statistics); {rounds} rounds; "
          f"claim limit {LIMIT}; no S3")
    print(f"{'sessions':>8}  {'ours rows/s':>11}  {'no ANALYZE rows/s':>17}"
          f"  {'round trips/row':>15}"
          f"  {'server µs/row':>13}  {'client CPU µs/row':>17}"
          f"  {'pgbench rows/s':>14}  {'pgbench server µs/row':>21}")

    def median(kind: str, n: int, field: str) -> float:
        return float(statistics.median(getattr(r, field) for r in runs[kind][n]))

    for n in SESSIONS:
        print(f"{n:>8}  {median('ours', n, 'rows_per_s'):>11.0f}"
              f"  {median('nostats', n, 'rows_per_s'):>17.0f}"
              f"  {median('ours', n, 'round_trips_per_row'):>15.2f}"
              f"  {median('ours', n, 'server_us_per_row'):>13.0f}"
              f"  {median('ours', n, 'client_us_per_row'):>17.0f}"
              f"  {median('pgbench', n, 'rows_per_s'):>14.0f}"
              f"  {median('pgbench', n, 'server_us_per_row'):>21.0f}")
    print("medians over the rounds; server time is pg_stat_database.active_time of each "
          "run's own clone; pgbench runs the same statements (context, not a target)")


if __name__ == "__main__":
    main()
