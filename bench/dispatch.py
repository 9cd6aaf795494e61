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

``--build NAME=PYTHON[+h11]`` (repeatable; also with ``--enqueue`` and ``--latency``): ours
with another build's interpreter as ``ql3``, builds alternated within each round. Each
build's batch gets a database migrated by that build's own ``ql3 control migrate`` and
tokens issued by its own ``ql3 control token create``: builds at different migration
counts run side by side (a serve refuses, ``migration_pending``, a schema behind its code).

``--enqueue``: run creation alone. 1 and 3 replicas, no workers: N (default 1,000) "run now"
requests of one ``allow`` task from T (default 8) clients, each with a fresh
``Idempotency-Key``; wall time from the first request to the last answer, per-request
p50/p95, and the numbers checked to be exactly 1..N. Baseline of the same run: as many
``GET /v1/tasks/<name>`` from the same clients (the HTTP and token-check floor). Target:
1,000 requests from 8 clients in <= 5 s.

``--latency``: how soon an idle cluster starts a run. 2 replicas, 2 workers x 8, idle; N
(default 200) "run now" requests spaced ``--spacing`` (0.25 s) apart, alternating over the
replicas; p50/p95 of run made -> ``started`` recorded (both on the database clock), and of
run made -> claimed. Baseline: none in the same run (the figure before is main's, recorded
in bench/README.md). Target: p50 <= 100 ms, p95 <= 250 ms.
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
from dispatch_ours import cpu_with_children_s, run_enqueue, run_latency, run_ours
from dispatch_procrastinate import (
    apply_schema,
    enqueue,
    verify,
    wait_workers_ready,
    workers,
)

WORKERS, CONCURRENCY = 2, 8
REPLICAS = (1, 3)
TASKS = {"true": ("true",), "echo": ("echo", "one line of output")}
# what a build runs as ``ql3``: its interpreter with ql3's entry point; ``+h11`` hides
# httptools and uvloop from it, so uvicorn falls back to h11 and asyncio's own loop
_BOOT = "import sys; sys.argv[0] = 'ql3'; from qinglong.local.app.cli import entry; entry()"
_HIDE = "import sys; sys.modules['httptools'] = None; sys.modules['uvloop'] = None; "


def build_command(spec: str) -> tuple[str, list[str]]:
    """``NAME=PYTHON[+h11]`` -> (NAME, the command that runs that build's ``ql3``)."""
    name, _, python = spec.partition("=")
    hide = python.endswith("+h11")
    python = python.removesuffix("+h11")
    if not name or not python:
        raise SystemExit(f"--build wants NAME=PYTHON[+h11], got {spec!r}")
    return name, [python, "-c", (_HIDE if hide else "") + _BOOT]


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
    parser.add_argument("--only", action="append",
                        help="run only these configurations (ours_1, ours_3, procrastinate, "
                             "floor; with --build, NAME_1 ...)")
    parser.add_argument("--build", action="append", default=None, metavar="NAME=PYTHON[+h11]",
                        help="ours with another build's interpreter (repeatable; default "
                             "ours=this one); +h11 hides httptools and uvloop")
    parser.add_argument("--task", choices=sorted(TASKS), default="true",
                        help="ours: the task's command (true, or echo printing one line)")
    parser.add_argument("--enqueue", action="store_true",
                        help="run creation alone: N run-now requests from T clients")
    parser.add_argument("--latency", action="store_true",
                        help="run now -> started on an idle cluster, N spaced requests")
    parser.add_argument("--spacing", type=float, default=0.25,
                        help="--latency: seconds between requests")
    args = parser.parse_args()
    if args.enqueue:
        return enqueue_main(args)
    if args.latency:
        return latency_main(args)
    builds = _builds(args, "ours")
    kinds = args.only or [f"{b}_{r}" for b in builds for r in REPLICAS] + [
        "procrastinate", "floor"]
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
                    build, _, replicas = kind.rpartition("_")
                    command = builds.get(build)
                    r = run_ours(where, moto, replicas=int(replicas),
                                 workers=WORKERS, concurrency=CONCURRENCY, runs=args.runs,
                                 threads=args.threads, timeout_s=args.timeout,
                                 profile_dir=args.profile, argv=TASKS[args.task],
                                 tag=build, **_command(command))
                    results[kind].append({
                        "rate": r.runs / r.span_s if r.span_s else 0.0, "span_s": r.span_s,
                        "enqueue_s": r.enqueue_s, "problems": list(r.problems),
                        "phase_ms": r.phase_ms, "requests": r.requests,
                        "cpu_ms_per_attempt": {k: round(1000 * v / r.runs, 2)
                                               for k, v in r.cpu_s.items()},
                        "attempts_cpu_ms": round(1000 * r.attempts_cpu_s / r.runs, 2),
                        "rss_mib": r.rss_mib})
    return report(args, results)


def enqueue_main(args: argparse.Namespace) -> int:
    """``--enqueue``: medians over the rounds per replica count; 1 when a batch's numbers
    were not exactly 1..N."""
    runs = args.runs if args.runs != 200 else 1000
    threads = args.threads if args.threads != 4 else 8
    builds = _builds(args, "enqueue")
    results: dict[str, list[dict[str, Any]]] = {f"{b}_{r}": [] for b in builds
                                                 for r in REPLICAS}
    with tempfile.TemporaryDirectory(prefix="ql3bench-enqueue-") as tmp, \
            moto_server() as moto:
        for rnd in range(args.rounds):
            for kind, rows in results.items():  # alternate: drift hits every build alike
                build, _, replicas = kind.rpartition("_")
                r = run_enqueue(Path(tmp) / f"{kind}-{rnd}", moto, replicas=int(replicas),
                                runs=runs, threads=threads, **_command(builds[build]))
                rows.append({
                    "wall_s": r.wall_s, "db_span_s": r.db_span_s, "latency_ms": r.latency_ms,
                    "floor_wall_s": r.floor_wall_s, "floor_ms": r.floor_ms,
                    "problems": list(r.problems)})
    print(f"{runs} run-now requests of one task from {threads} clients, {args.rounds} "
          "round(s); medians")
    print(f"{'build, replicas':<22}{'wall s':>8}{'runs/s':>9}{'p50 ms':>8}{'p95 ms':>8}"
          f"{'floor s':>9}{'ratio':>7}  numbers 1..N")
    for key, rs in results.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        floor = statistics.median(r["floor_wall_s"] for r in rs)
        p50 = statistics.median(r["latency_ms"]["p50"] for r in rs)
        p95 = statistics.median(r["latency_ms"]["p95"] for r in rs)
        ok = all(not r["problems"] for r in rs)
        label = ", ".join(key.rpartition("_")[::2])
        print(f"{label:<22}{wall:>8.2f}{runs / wall:>9.0f}{p50:>8.1f}{p95:>8.1f}"
              f"{floor:>9.2f}{wall / floor:>7.2f}  "
              f"{'yes' if ok else 'NO: ' + '; '.join(rs[-1]['problems'])}")
    print("floor: as many GET /v1/tasks/<name> from the same clients; ratio = wall / floor")
    print("target: 1,000 requests from 8 clients in <= 5 s (printed, not asserted)")
    print(json.dumps({"runs": runs, "threads": threads, "rounds": args.rounds,
                      "results": results}, sort_keys=True))
    return 0 if all(not r["problems"] for rs in results.values() for r in rs) else 1


def latency_main(args: argparse.Namespace) -> int:
    """``--latency``: one batch per build per round (builds alternated within a round);
    medians of the percentiles over the rounds, per build."""
    builds = _builds(args, "latency")
    results: dict[str, list[dict[str, Any]]] = {b: [] for b in builds}
    with tempfile.TemporaryDirectory(prefix="ql3bench-latency-") as tmp, \
            moto_server() as moto:
        for rnd in range(args.rounds):
            for build, rows in results.items():
                r = run_latency(Path(tmp) / f"{build}-{rnd}", moto, replicas=2,
                                workers=WORKERS, concurrency=CONCURRENCY, runs=args.runs,
                                spacing_s=args.spacing, timeout_s=args.timeout,
                                **_command(builds[build]))
                rows.append({"started_ms": r.started_ms, "claimed_ms": r.claimed_ms,
                             "problems": list(r.problems)})
    print(f"{args.runs} run-now requests {args.spacing:.2f} s apart over 2 replicas, "
          f"{WORKERS} idle workers x {CONCURRENCY}, {args.rounds} round(s); medians")
    for build, rows in results.items():
        def med(key: str, q: str, rows: list[dict[str, Any]] = rows) -> float:
            return float(statistics.median(r[key][q] for r in rows))
        for key, label in (("claimed_ms", "made -> claimed"),
                           ("started_ms", "made -> started")):
            print(f"{build + ':':<12}{label:<18} p50 {med(key, 'p50'):7.1f} ms  "
                  f"p95 {med(key, 'p95'):7.1f} ms  max {med(key, 'max'):7.1f} ms")
        ok = all(not r["problems"] for r in rows)
        print(f"{build + ':':<12}exactly once: "
              f"{'yes' if ok else 'NO: ' + '; '.join(rows[-1]['problems'])}")
    print("target: made -> started p50 <= 100 ms, p95 <= 250 ms (printed, not asserted)")
    print(json.dumps({"runs": args.runs, "spacing_s": args.spacing, "rounds": args.rounds,
                      "results": results if len(results) > 1 else results["latency"]},
                     sort_keys=True))
    return 0 if all(not r["problems"] for rs in results.values() for r in rs) else 1


def _builds(args: argparse.Namespace, default: str) -> dict[str, list[str] | None]:
    """The ``--build`` commands by name; without ``--build``, ``default`` = this checkout."""
    if not args.build:
        return {default: None}
    return dict(build_command(b) for b in args.build)


def _command(command: list[str] | None) -> dict[str, Any]:
    """``command=`` for the dispatch_ours runners, nothing for this checkout's ``ql3``."""
    return {"command": command} if command else {}


def report(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> int:
    """Print the table, the ratios and one JSON line; 1 when a batch failed its check."""
    def median(kind: str, key: str = "rate") -> float:
        values = [r[key] for r in results.get(kind, []) if key in r]
        return float(statistics.median(values)) if values else float("nan")

    print(f"{args.runs} runs per batch, {args.rounds} round(s), {WORKERS} workers x "
          f"concurrency {CONCURRENCY}, {args.threads} enqueueing clients, task "
          f"{' '.join(TASKS[args.task])!r}; medians")
    print(f"{'system':<22}{'attempts/s':>11}{'span s':>9}{'enqueue s':>11}  exactly once")
    labels = {"procrastinate": "procrastinate", "floor": "floor (spawn true)"}
    ours = [k for k in results if k not in labels]
    labels = {**{k: "{}, {} replica{}".format(*k.rpartition("_")[::2],
                                             "" if k.endswith("_1") else "s") for k in ours},
              **labels}
    for kind, label in labels.items():
        if not results.get(kind):
            continue
        ok = all(not r["problems"] for r in results[kind])
        span = f"{median(kind, 'span_s'):>9.2f}" if kind != "floor" else f"{'':>9}"
        enq = f"{median(kind, 'enqueue_s'):>11.2f}" if kind != "floor" else f"{'':>11}"
        print(f"{label:<22}{median(kind):>11.1f}{span}{enq}  "
              f"{'yes' if ok else 'NO: ' + '; '.join(results[kind][-1]['problems'])}")
    ratios = {f"{k}/{b}": median(k) / median(b) for k in ours
              for b in ("procrastinate", "floor") if results.get(b)}
    for name, value in ratios.items():
        print(f"ratio {name}: {value:.2f}")
    for kind in [*ours, "procrastinate"]:
        if not results.get(kind):
            continue
        cpu = results[kind][-1].get("cpu_ms_per_attempt", {})
        phases = results[kind][-1].get("phase_ms", {})
        print(f"{labels[kind]}: CPU ms per attempt " +
              ", ".join(f"{k} {v:.1f}" for k, v in cpu.items()) +
              ("; median ms per attempt " + ", ".join(f"{k} {v:.0f}" for k, v in phases.items())
               if phases else ""))
        if "attempts_cpu_ms" in results[kind][-1]:
            print(f"    of the workers' CPU per attempt, their children's (group wrapper and "
                  f"task): {results[kind][-1]['attempts_cpu_ms']:.1f} ms")
        rss = results[kind][-1].get("rss_mib", {})
        if rss:
            print("    RSS MiB at the batch's end: " +
                  ", ".join(f"{name} {mib:.1f}" for name, mib in rss.items()))
        for route, st in results[kind][-1].get("requests", {}).items():
            print(f"    {route:<34} {st['count']:>6.0f} requests, mean {st['mean_ms']:.1f} ms")
    print("target: ours >= procrastinate with the same worker processes (printed, not "
          "asserted)")
    print(json.dumps({"runs": args.runs, "rounds": args.rounds, "threads": args.threads,
                      "task": args.task, "results": results, "ratios": ratios},
                     sort_keys=True))
    return 0 if all(not r["problems"] for rs in results.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
