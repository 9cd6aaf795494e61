"""Claim(16) + finalize rows per second (no S3) at 1, 2 and 4 sessions, beside pgbench.

ours:     N processes, each with its own psycopg 3 connection (autocommit, READ COMMITTED, as
          the runtime role), looping ``claims.claim(limit=16)`` then ``finalize.finalize`` per
          claimed row (outcome ``deleted``), exactly as a sweep does minus the S3 calls. The
          sessions start their timed windows together, after every process has imported and
          connected (a barrier), so no start-up work lands inside anyone's window.
baseline: ``pgbench -M prepared -c N -j N -T DURATION -n`` running the same statements from
          ``retention/queries.sql`` in the round trips ours uses per row: [BEGIN; lock_control]
          then [retire_control; COMMIT], each pair pipelined (``\\startpipeline``). The claim
          is BEGIN | claim | COMMIT for pgbench (its ``\\gset`` cannot be pipelined) and
          [BEGIN; claim] | COMMIT for ours: 1/16 of a round trip per row in ours' favour.
          pgbench cannot loop over a result set, so the claim statement is wrapped,
          unchanged, in an outer CTE that hands the claimed rows' ids and versions to the
          finalize blocks through ``\\gset``; retire_control takes those (what the locked row
          holds when the fence holds), a fixed ``retired_at`` and a fixed evidence string of
          the usual length (ours builds the evidence in Python from the locked row and
          hashes it, and checks the fence in Python between the two round trips).

floor:    ours' round trips and statements with no per-row work in Python: the claimed rows'
          values are handed on as the server's text, no row is loaded, no fence is checked and
          the evidence is pgbench's fixed string (raw ``psycopg.pq`` calls). It is not a
          client anyone should run; it separates what the round trips cost a Python process
          from what our per-row protocol work costs, so a ratio below target says which one to
          look at.
client CPU: user + system CPU seconds of the client processes over the run, per row (µs):
          ``getrusage`` of each session over its timed window, and of pgbench (children) over
          its whole run. It moves far less from run to run than rows/s on a shared host.

Each configuration runs on a fresh clone of one seeded database (identical starting state),
in the same run, interleaved per session count, for ROUNDS rounds (a single few-second
sample on a shared 2-core machine moves by ±30 %). Prints the median rows/s of each, the
median of the per-round ratios (each round's runs are back to back, so a ratio compares runs
under the same host conditions), each round's ratio, and the median client CPU per row
(issue 4 target: ours/pgbench >= 0.8 at 2 and 4 sessions).
Usage: python bench/claims.py [SECONDS_PER_RUN (8)] [ROUNDS (5)]  (about 8 minutes)
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


# claim columns handed to the finalize blocks (pgbench variable prefix, RETURNING column)
_HANDED = {"a": "attempt_id", "v": "claim_version", "p": "project_id", "r": "run_id",
           "f": "artifact_id"}


def pgbench_script(path: Path) -> None:
    """Write the pgbench script: the claim and finalize statements of queries.sql verbatim,
    with ``%(name)s`` turned into pgbench's ``:name``, in ours' round trips: BEGIN | claim |
    COMMIT, then per row [BEGIN; lock_control] and [retire_control; COMMIT] pipelined.
    pgbench cannot ``\\gset`` inside a pipeline, so retire_control takes the claim's values
    (what the locked row holds when the fence holds) and a fixed ``retired_at``."""
    from qinglong.control.retention.claims import queries

    q = {k: re.sub(r"%\((\w+)\)s", r":\1", v) for k, v in queries().items()}
    handed = ", ".join(f"{col}s[{i}] AS {var}{i}" for var, col in _HANDED.items()
                       for i in range(1, LIMIT + 1))
    arrays = ", ".join(f"array_agg({col}) AS {col}s" for col in _HANDED.values())
    claim_sql = " ".join(q["claim"].split())  # pgbench: one SQL command per line
    lines = ["BEGIN;",
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


EVIDENCE = "x" * 560  # pgbench's and the floor's evidence: the usual length, fixed
DIGEST = "0" * 64
RETIRED_AT = "2026-01-01T00:00:00+00:00"


class Run(NamedTuple):
    """One timed run: rows retired per second and client CPU (user + system) per row, µs."""

    rows_per_s: float
    client_us_per_row: float


def run_pgbench(db: str, role: str, sessions: int, seconds: int, script: Path) -> Run:
    """pgbench on ``db``: its tps (excluding connection time) × rows per cycle, and its CPU."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
    return Run(float(tps.group(1)) * rows / max(int(done.group(1)), 1),
               1e6 * cpu_s / max(rows, 1))


def _cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return float(usage.ru_utime + usage.ru_stime)


def _session(url: str, index: int, ready: Any, seconds: float, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """One session of ours: claim+finalize for ``seconds`` once every session is ready;
    reports (rows, elapsed)."""
    from qinglong.control.db.pool import connect
    from qinglong.control.retention.claims import claim, process_owner
    from qinglong.control.retention.finalize import Outcome, finalize

    conn = connect(url)
    owner = process_owner(f"bench-{index}")
    ready.wait(120)  # imported and connected: no start-up work inside anyone's timed window
    t0, cpu0, rows = time.perf_counter(), _cpu_s(), 0
    end = t0 + seconds
    while time.perf_counter() < end:
        claims = claim(conn, owner, limit=LIMIT, lease_s=LEASE_S)
        if not claims:
            raise RuntimeError("ran out of due controls: raise ROWS")
        for c in claims:
            finalize(conn, c, Outcome.DELETED)
        rows += len(claims)
    out.put((rows, time.perf_counter() - t0, _cpu_s() - cpu0))
    conn.close()


def _floor_session(url: str, index: int, ready: Any, seconds: float,
                   out: mp.Queue) -> None:  # type: ignore[type-arg]
    """The floor (module docstring): ours' statements in ours' pipelined round trips, with
    every per-row value handed on as the server's text. Reports (rows, elapsed, cpu_s)."""
    import select

    import psycopg
    from psycopg.pq import ExecStatus

    from qinglong.control.db.prepared import positional
    from qinglong.control.retention.claims import queries

    conn = psycopg.connect(url, autocommit=True)
    pgconn = conn.pgconn
    order: dict[bytes, tuple[str, ...]] = {}
    for name in ("claim", "lock_control", "retire_control"):
        sql, params = positional(queries()[name])
        order[name.encode()] = params
        pgconn.prepare(name.encode(), sql.encode())
    pgconn.prepare(b"begin", b"BEGIN ISOLATION LEVEL READ COMMITTED")
    pgconn.prepare(b"commit", b"COMMIT")
    poller = select.poll()
    poller.register(pgconn.socket, select.POLLIN)

    def round_trip(*calls: tuple[bytes, dict[str, bytes]]) -> list[Any]:
        pgconn.enter_pipeline_mode()
        for name, values in calls:
            pgconn.send_query_prepared(name, [values[p] for p in order.get(name, ())])
        pgconn.pipeline_sync()
        while pgconn.flush():
            pass
        results = []
        while True:
            while pgconn.is_busy():
                poller.poll()
                pgconn.consume_input()
            result = pgconn.get_result()
            if result is None:
                continue
            if result.status == ExecStatus.PIPELINE_SYNC:
                break
            if result.status not in (ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK):
                raise RuntimeError(f"floor statement failed: {result.error_message!r}")
            results.append(result)
        pgconn.exit_pipeline_mode()
        return results

    fixed = {"limit": str(LIMIT).encode(), "owner": f"floor/{index}".encode(),
             "lease_s": str(LEASE_S).encode(), "versioned_only": b"f", "outcome": b"deleted",
             "retired_at": RETIRED_AT.encode(), "evidence": EVIDENCE.encode(),
             "evidence_sha256": DIGEST.encode()}
    ready.wait(120)
    t0, cpu0, rows = time.perf_counter(), _cpu_s(), 0
    end = t0 + seconds
    while time.perf_counter() < end:
        claimed = round_trip((b"begin", {}), (b"claim", fixed))[1]
        round_trip((b"commit", {}))
        if not claimed.ntuples:
            raise RuntimeError("ran out of due controls: raise ROWS")
        for i in range(claimed.ntuples):
            value = claimed.get_value  # text columns: leased, attempt_id, project_id, …
            row = dict(fixed, attempt_id=value(i, 1), project_id=value(i, 2),
                       run_id=value(i, 3), artifact_id=value(i, 4), claim_version=value(i, 13))
            round_trip((b"begin", {}), (b"lock_control", row))
            round_trip((b"retire_control", row), (b"commit", {}))
        rows += claimed.ntuples
    out.put((rows, time.perf_counter() - t0, _cpu_s() - cpu0))
    conn.close()


def run_ours(db: str, role: str, sessions: int, seconds: int, *, floor: bool = False) -> Run:
    """Rows/s summed over ``sessions`` processes (each rows / its own elapsed) and their CPU
    per row; ``floor``: the floor client instead of ours."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    ready = ctx.Barrier(sessions + 1)  # all sessions start together, after start-up
    target = _floor_session if floor else _session
    procs = [ctx.Process(target=target, args=(role_url(db, role), i, ready, seconds, out))
             for i in range(sessions)]
    for p in procs:
        p.start()
    ready.wait(120)
    results = [out.get(timeout=seconds + 60) for _ in procs]
    for p in procs:
        p.join(30)
    rows = sum(r[0] for r in results)
    return Run(sum(rows / elapsed for rows, elapsed, _ in results),
               1e6 * sum(cpu for _, _, cpu in results) / max(rows, 1))


def main() -> None:
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
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
        runs: dict[str, dict[int, list[Run]]] = {
            kind: {n: [] for n in SESSIONS} for kind in ("pgbench", "ours", "floor")}
        for _ in range(rounds):
            for n in SESSIONS:  # interleaved, so drift hits all alike
                with cloned_database(tmpl) as db:
                    runs["pgbench"][n].append(run_pgbench(db, role, n, seconds, script))
                with cloned_database(tmpl) as db:
                    runs["ours"][n].append(run_ours(db, role, n, seconds))
                with cloned_database(tmpl) as db:
                    runs["floor"][n].append(run_ours(db, role, n, seconds, floor=True))
        with admin() as conn:
            version = conn.execute("SHOW server_version").fetchone()
    print(f"PostgreSQL {version[0] if version else '?'}; {ROWS} due controls per run; "
          f"{seconds} s per run; {rounds} rounds; claim limit {LIMIT}; no S3")
    print(f"{'sessions':>8}  {'pgbench rows/s':>14}  {'ours rows/s':>11}  {'ours/pgbench':>12}"
          f"  {'floor/pgbench':>13}  {'client CPU µs/row: pgbench ours floor':>37}"
          f"  ours/pgbench per round")

    def median(kind: str, n: int, field: str) -> float:
        return float(statistics.median(getattr(r, field) for r in runs[kind][n]))

    def paired(kind: str, n: int) -> list[float]:  # each round against its own pgbench run
        return [x.rows_per_s / y.rows_per_s
                for x, y in zip(runs[kind][n], runs["pgbench"][n], strict=True)]

    for n in SESSIONS:
        b, o = (median(k, n, "rows_per_s") for k in ("pgbench", "ours"))
        ratio, floor = statistics.median(paired("ours", n)), statistics.median(paired("floor", n))
        cpu = "  ".join(f"{median(k, n, 'client_us_per_row'):>5.0f}"
                        for k in ("pgbench", "ours", "floor"))
        each = " ".join(f"{r:.2f}" for r in paired("ours", n))
        print(f"{n:>8}  {b:>14.0f}  {o:>11.0f}  {ratio:>12.2f}  {floor:>13.2f}  {cpu:>37}"
              f"  {each}")
    print("rows/s and CPU: medians over the rounds; ratios: median of the per-round ratios "
          "(each round's runs are back to back)")
    print("target: ours/pgbench >= 0.8 at 2 and 4 sessions")

if __name__ == "__main__":
    main()
