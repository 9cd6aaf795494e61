"""Attempts completed per second (issue 13 item 4): ours with 1 and 3 control replicas beside
procrastinate and a floor, on the same PostgreSQL in the same run.

ours:          2 ``ql3 worker run`` processes (concurrency 8 each) running a task whose argv
               is ``true``, behind 1 or 3 ``ql3 control serve`` replicas, on a fresh
               database and a fresh versioned bucket on moto (``bench/dispatch_ours.py``).
               Runs are queued through ``POST /v1/tasks/{name}/run`` by THREADS API clients;
               every attempt takes the real path: claim, group wrapper, ``started``,
               log-upload grant, PUT of its log to S3, completion (control HEADs the log).
procrastinate: 2 worker processes (concurrency 8 each) of an app whose one async task runs
               ``true`` as a subprocess, on a private database of its own with procrastinate's
               schema, its psycopg connector, LISTEN/NOTIFY on; jobs deferred one per call by
               THREADS client threads (``bench/dispatch_procrastinate.py``).
floor:         2 processes that only spawn ``true`` and wait for it, in a loop (N/2 each).

Rate = N / span, the span from the first enqueue to the last completion, both read from the
database clock (ours: runs.created_at .. finished_at; procrastinate: its ``deferred`` ..
``succeeded`` events); the floor's from the wall clock. Every batch is checked exactly-once
from the database (ours: one attempt per run, started and completed once, one log each;
procrastinate: one attempt, one ``started`` and one ``succeeded`` event per job); a batch
that fails the check is reported as such and makes the exit status 1. Configurations
alternate within each round; medians are printed, then one JSON line.

Target (issue 13 item 4): ours >= procrastinate with the same number of worker processes.
Printed, never asserted. Usage:
    python bench/dispatch.py [--runs N (200)] [--rounds R (1)] [--threads T (4)]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import admin, db_url, drop_database, moto_server, unique
from dispatch_ours import cpu_with_children_s, run_ours
from dispatch_procrastinate import (
    apply_schema,
    enqueue,
    verify,
    wait_workers_ready,
    workers,
)

WORKERS, CONCURRENCY = 2, 8
REPLICAS = (1, 3)


def _spawn_loop(count: int, start: Any, out: Any) -> None:
    start.wait(60)
    t0 = time.perf_counter()
    for _ in range(count):
        subprocess.run(["true"], check=True)
    out.put(time.perf_counter() - t0)


def run_floor(runs: int) -> float:
    """Spawns per second of ``WORKERS`` processes each running ``true`` runs/WORKERS times,
    one after another; they start together (a barrier) and the slowest one's time counts."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Barrier(WORKERS + 1), ctx.Queue()
    procs = [ctx.Process(target=_spawn_loop, args=(runs // WORKERS, start, out))
             for _ in range(WORKERS)]
    for p in procs:
        p.start()
    start.wait(60)
    elapsed = max(out.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(10)
    return (runs // WORKERS) * WORKERS / elapsed


def run_procrastinate(tmp: Path, runs: int, threads: int, timeout_s: float) -> dict[str, Any]:
    """One batch on a fresh database with procrastinate's schema (dropped afterwards)."""
    import psycopg

    name = unique("ql3bench_proc")
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    conninfo = db_url(name)
    try:
        apply_schema(conninfo)

        def connect() -> psycopg.Connection[Any]:
            return psycopg.connect(conninfo, autocommit=True)

        with workers(conninfo, WORKERS, CONCURRENCY, tmp) as procs:
            wait_workers_ready(connect, WORKERS, 30)
            cpu0 = sum(cpu_with_children_s(p.pid) for p in procs)
            enqueue(conninfo, runs, threads)
            deadline = time.monotonic() + timeout_s
            with connect() as conn:
                while time.monotonic() < deadline:
                    row = conn.execute("SELECT count(*) FROM procrastinate_jobs WHERE status"
                                       " NOT IN ('todo', 'doing')").fetchone()
                    if row and row[0] >= runs:
                        break
                    time.sleep(0.05)
            cpu_ms = 1000 * (sum(cpu_with_children_s(p.pid) for p in procs) - cpu0) / runs
        result = verify(connect, runs)
    finally:
        drop_database(name)
    return {"rate": runs / result.span_s if result.span_s else 0.0, "span_s": result.span_s,
            "enqueue_s": result.enqueue_s, "problems": list(result.problems),
            "cpu_ms_per_attempt": {"workers": round(cpu_ms, 2)}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs (jobs) per batch")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=4, help="enqueueing clients")
    parser.add_argument("--timeout", type=float, default=300.0, help="per batch, seconds")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="py-spy samples of our replicas and workers into DIR")
    parser.add_argument("--only", choices=("ours_1", "ours_3", "procrastinate", "floor"),
                        action="append", help="run only these configurations")
    args = parser.parse_args()
    kinds = args.only or [f"ours_{r}" for r in REPLICAS] + ["procrastinate", "floor"]
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    with tempfile.TemporaryDirectory(prefix="ql3bench-dispatch-") as tmp, \
            moto_server() as moto:
        for rnd in range(args.rounds):
            for kind in kinds:  # alternate, so drift hits every configuration alike
                where = Path(tmp) / f"{kind}-{rnd}"
                where.mkdir()
                if kind == "floor":
                    results[kind].append({"rate": run_floor(args.runs), "problems": []})
                elif kind == "procrastinate":
                    results[kind].append(run_procrastinate(where, args.runs, args.threads,
                                                           args.timeout))
                else:
                    r = run_ours(where, moto, replicas=int(kind.split("_")[1]),
                                 workers=WORKERS, concurrency=CONCURRENCY, runs=args.runs,
                                 threads=args.threads, timeout_s=args.timeout,
                                 profile_dir=args.profile)
                    results[kind].append({
                        "rate": r.runs / r.span_s if r.span_s else 0.0, "span_s": r.span_s,
                        "enqueue_s": r.enqueue_s, "problems": list(r.problems),
                        "phase_ms": r.phase_ms, "requests": r.requests,
                        "cpu_ms_per_attempt": {k: round(1000 * v / r.runs, 2)
                                               for k, v in r.cpu_s.items()}})
    return report(args, results)


def report(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> int:
    """Print the table, the ratios and one JSON line; 1 when a batch failed its check."""
    def median(kind: str, key: str = "rate") -> float:
        values = [r[key] for r in results.get(kind, []) if key in r]
        return float(statistics.median(values)) if values else float("nan")

    print(f"{args.runs} runs per batch, {args.rounds} round(s), {WORKERS} workers x "
          f"concurrency {CONCURRENCY}, {args.threads} enqueueing clients; medians")
    print(f"{'system':<22}{'attempts/s':>11}{'span s':>9}{'enqueue s':>11}  exactly once")
    labels = {"ours_1": "ours, 1 replica", "ours_3": "ours, 3 replicas",
              "procrastinate": "procrastinate", "floor": "floor (spawn true)"}
    for kind, label in labels.items():
        if not results.get(kind):
            continue
        ok = all(not r["problems"] for r in results[kind])
        span = f"{median(kind, 'span_s'):>9.2f}" if kind != "floor" else f"{'':>9}"
        enq = f"{median(kind, 'enqueue_s'):>11.2f}" if kind != "floor" else f"{'':>11}"
        print(f"{label:<22}{median(kind):>11.1f}{span}{enq}  "
              f"{'yes' if ok else 'NO: ' + '; '.join(results[kind][-1]['problems'])}")
    ratios = {f"{k}/{b}": median(k) / median(b) for k in ("ours_1", "ours_3")
              for b in ("procrastinate", "floor")}
    for name, value in ratios.items():
        print(f"ratio {name}: {value:.2f}")
    for kind in ("ours_1", "ours_3", "procrastinate"):
        if not results.get(kind):
            continue
        cpu = results[kind][-1].get("cpu_ms_per_attempt", {})
        phases = results[kind][-1].get("phase_ms", {})
        print(f"{labels[kind]}: CPU ms per attempt " +
              ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()) +
              ("; median ms per attempt " + ", ".join(f"{k} {v:.0f}" for k, v in phases.items())
               if phases else ""))
        for route, st in results[kind][-1].get("requests", {}).items():
            print(f"    {route:<34} {st['count']:>6.0f} requests, mean {st['mean_ms']:.1f} ms")
    print("target: ours >= procrastinate with the same worker processes (printed, not "
          "asserted)")
    print(json.dumps({"runs": args.runs, "rounds": args.rounds, "threads": args.threads,
                      "results": results, "ratios": ratios}, sort_keys=True))
    return 0 if all(not r["problems"] for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
