"""Claim latency while cluster history is pruned, and table sizes after VACUUM.

``python bench/history.py [RUNS] [TASKS] [LIMIT[,…]] [DUTY[,…]] [--window S]
[--no-back-to-back]`` (default 100,000 runs over 100 tasks, 100 runs a batch, the serve's duty
``DUTY_DEFAULT``). One migrated database is seeded with RUNS finished runs 100–200 days old
(each: one attempt, three events, one occurrence; past the 90-day history retention, so all but
each task's newest 20 are due) and 20,000 queued runs of as many other tasks for the dispatch
claim. It is cloned once per phase, in the same run:

- back-to-back (unless ``--no-back-to-back``): ``PacedPruner`` with 500 runs a batch and duty 1
  (no rest) prunes until nothing is due while another thread runs dispatch ``pick_runs``
  (16 runs, rolled back) back to back;
- paced: the same with LIMIT and DUTY (one phase per pair when either lists several);
- baseline: the same claim loop for the longest of the phases' wall times, nothing pruned.

``--window S [--slice S2]`` (at a low duty a million runs take days): instead, one paced phase
(the first LIMIT and DUTY) and the baseline on two clones at once, their claim loops taking
turns in S2-second slices (30; A B B A …) until each had S seconds, so both see the same load
from other sessions; then the rest is pruned with no claims (timed apart, not in the ratio)
so the sizes are those of all history pruned.

Prints, per phase, the claim latency p50/p99 (ms) and the p99 ratio to the baseline (the
issue's target: ≤ 1.5), the pruning rate (runs/s), the share of the wall time spent in batches,
the 1-minute load average at the start and end of the phase, what the claim's backend was doing
(``pg_stat_activity`` wait events and ungranted ``pg_locks``, sampled every 10 ms), an
``EXPLAIN (ANALYZE, BUFFERS)`` of one claim taken at the 20th batch, and
``pg_total_relation_size`` of runs, attempts, events and occurrences after a plain ``VACUUM``
of each clone (baseline: the history kept; pruned: after pruning). None of this is a test:
bench/README.md records the figures.
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_support import cloned_database, db_url, migrated_database, role_url
from qinglong.control.db.engine import create_engine
from qinglong.control.dispatch.statements import sql as dispatch_sql

PROJECT = "00000000-0000-7000-8000-0000000000aa"
POOL = "00000000-0000-7000-8000-0000000000bb"
INCARNATION = "00000000-0000-7000-8000-0000000000cc"
QUEUED = 20_000
TABLES = ("runs", "attempts", "events", "occurrences")


def _key(kind: int, n: str) -> str:
    return f"('00000000-0000-7000-8{kind:03x}-' || lpad(to_hex({n}), 12, '0'))::uuid"


def seed(name: str, runs: int, tasks: int) -> None:
    """RUNS old runs with their history and QUEUED due runs over TASKS tasks (one transaction,
    foreign-key triggers skipped: consistent by construction), then VACUUM ANALYZE."""
    t = f"(g % {tasks}) + 1"
    import psycopg
    with psycopg.connect(db_url(name), autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(f"INSERT INTO worker_pools (id, name) VALUES ('{POOL}', 'p')".encode())
            conn.execute(f"INSERT INTO worker_incarnations (id, pool_id, name, concurrency)"
                         f" VALUES ('{INCARNATION}', '{POOL}', 'w', 4)".encode())
            conn.execute(f"""
INSERT INTO tasks (id, project_id, name, log_retention_s, argv)
  SELECT {_key(1, 'g')}, '{PROJECT}', '任务' || g, 0, '["true"]'
  FROM generate_series(1, 2 * {tasks}) g;
INSERT INTO runs (id, project_id, task_id, owner, status, finished_at, not_before)
  SELECT {_key(2, 'g')}, '{PROJECT}', {_key(1, t)}, 'runtime', 'succeeded',
         now() - interval '200 days' + g * (interval '100 days' / {runs}), now()
  FROM generate_series(1, {runs}) g;
INSERT INTO attempts (id, run_id, number, executor, status, finished_at)
  SELECT {_key(3, 'g')}, {_key(2, 'g')}, 1, 'local_process', 'succeeded',
         now() - interval '150 days'
  FROM generate_series(1, {runs}) g;
INSERT INTO events (id, run_id, attempt_id, kind, to_status)
  SELECT {_key(4, 'g * 3 + k')}, {_key(2, 'g')}, {_key(3, 'g')}, 'run', 'succeeded'
  FROM generate_series(1, {runs}) g, generate_series(0, 2) k;
INSERT INTO occurrences (id, task_id, outcome, first_slot, last_slot, run_id)
  SELECT {_key(7, 'g')}, {_key(1, t)}, 'run_created', now() - interval '150 days',
         now() - interval '150 days', {_key(2, 'g')}
  FROM generate_series(1, {runs}) g;
INSERT INTO runs (id, project_id, task_id, owner, status, not_before)
  SELECT {_key(8, 'g')}, '{PROJECT}', {_key(1, f"{t} + {tasks}")}, 'runtime', 'queued',
         now() - interval '1 hour' + g * interval '1 microsecond'
  FROM generate_series(1, {QUEUED}) g;
""".encode())
        conn.execute("VACUUM ANALYZE")


def claims(url: str, stop: threading.Event, out: list[float]) -> None:
    """``pick_runs`` (16) back to back, each in a transaction rolled back; ms per claim."""
    engine = create_engine(url, pool_size=1, max_overflow=0)
    params = {"incarnation_id": INCARNATION, "pool_id": POOL, "limit": 16}
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SET application_name = 'bench-claims'")
            conn.commit()
            while not stop.is_set():
                t0 = time.perf_counter()
                with conn.begin() as tx:
                    conn.exec_driver_sql(dispatch_sql("pick_runs"), params).all()
                    tx.rollback()
                out.append((time.perf_counter() - t0) * 1000)
    finally:
        engine.dispose()


def sizes(name: str) -> dict[str, int]:
    import psycopg
    with psycopg.connect(db_url(name), autocommit=True) as conn:
        conn.execute("VACUUM")
        out = {}
        for t in TABLES:
            row = conn.execute("SELECT pg_total_relation_size(%s)", (t,)).fetchone()
            assert row is not None
            out[t] = int(row[0])
        return out


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[int(q) - 1] if len(xs) > 1 else float("nan")


def sample_waits(url: str, stop: threading.Event, out: dict[str, int]) -> None:
    """Every 10 ms, what the claim backend (application_name ``bench-claims``) is doing:
    ``state/wait_event_type:wait_event`` counts, plus ``lock-wait`` when pg_locks shows it
    waiting for a lock."""
    import psycopg
    with psycopg.connect(url, autocommit=True) as conn:
        while not stop.is_set():
            for state, kind, event, blocked in conn.execute(
                    "SELECT a.state, a.wait_event_type, a.wait_event,"
                    " EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted)"
                    " FROM pg_stat_activity a WHERE a.application_name = 'bench-claims'"):
                key = f"{state}/{kind}:{event}" + (" lock-wait" if blocked else "")
                out[key] = out.get(key, 0) + 1
            stop.wait(0.01)


def explain_claim(url: str) -> str:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of ``pick_runs`` (rolled back): time and buffers."""
    import psycopg
    with psycopg.connect(url) as conn:
        rows = conn.execute(("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "
                             + dispatch_sql("pick_runs")).encode(),
                            {"incarnation_id": INCARNATION, "pool_id": POOL, "limit": 16}
                            ).fetchone()
        conn.rollback()
    assert rows is not None
    plan = rows[0][0]
    top = plan["Plan"]
    return (f"{plan['Execution Time']:.2f} ms, shared hit {top.get('Shared Hit Blocks')}"
            f" read {top.get('Shared Read Blocks')}")


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def pruned_phase(template: str, role: str, limit: int, duty: float
                 ) -> tuple[list[float], float, int, dict[str, int], dict[str, int], str, str]:
    """Claims on a clone while ``PacedPruner(limit, duty)`` prunes until nothing is due:
    (latencies ms, wall s, runs deleted, sizes after VACUUM, claim wait samples, EXPLAIN of a
    claim taken mid-way, a note of batch share and load)."""
    from qinglong.control.history.prune import PacedPruner
    with cloned_database(template) as db:
        url = role_url(db, role)
        stop, lat, waits = threading.Event(), list[float](), dict[str, int]()
        th = threading.Thread(target=claims, args=(url, stop, lat))
        ws = threading.Thread(target=sample_waits, args=(db_url(db), stop, waits))
        load0 = load()
        th.start()
        ws.start()
        engine = create_engine(url, pool_size=1, max_overflow=0)
        pruner = PacedPruner(engine, "bench", limit=limit, duty=duty)
        deleted, n, explained, t0 = 0, 0, "", time.perf_counter()
        try:
            while True:
                batch = pruner.tick()
                assert batch is not None
                deleted += batch.runs
                n += 1
                if n == 20:  # mid-way: a claim's plan and buffers while batches run
                    explained = explain_claim(url)
                if not batch.full and batch.runs == 0:
                    break
        finally:
            stop.set()
            engine.dispose()
        wall = time.perf_counter() - t0
        th.join()
        ws.join()
        note = (f"{n} batches, {100 * pruner.busy_s / wall:.2f} % of the wall time in"
                f" batches, load {load0} -> {load()}")
        return lat, wall, deleted, sizes(db), waits, explained, note


def interleaved(template: str, role: str, limit: int, duty: float, window: float,
                slice_s: float) -> None:
    """``--window``: two clones, one pruned by ``PacedPruner(limit, duty)`` and one not, the
    claim loop on each in turn for ``slice_s`` seconds (A B B A …) until each had ``window``
    seconds, so both sides see the same load from other processes. The pruner runs only in
    the pruned side's slices and its rests carry over from one slice to its next, so it keeps
    to its duty over the pruned side's time. Then the pruned clone is pruned to the end with
    no claims (timed apart) and both are VACUUMed for their sizes."""
    from qinglong.control.history.prune import PacedPruner
    with cloned_database(template) as pruned_db, cloned_database(template) as base_db:
        engine = create_engine(role_url(pruned_db, role), pool_size=1, max_overflow=0)
        owed = [0.0]

        def owe(seconds: float) -> bool:
            owed[0] = seconds
            return False

        pruner = PacedPruner(engine, "bench", limit=limit, duty=duty, rest=owe)
        lat = {"pruned": list[float](), "baseline": list[float]()}
        waits = {"pruned": dict[str, int](), "baseline": dict[str, int]()}
        spent = {"pruned": 0.0, "baseline": 0.0}
        loads, deleted, batches, explained, done = [load()], 0, 0, "", False
        order = ["pruned", "baseline", "baseline", "pruned"]
        i = 0
        try:
            while min(spent.values()) < window:
                side = order[i % 4]
                i += 1
                if spent[side] >= window:
                    continue
                db = pruned_db if side == "pruned" else base_db
                stop = threading.Event()
                th = threading.Thread(target=claims, args=(role_url(db, role), stop, lat[side]))
                ws = threading.Thread(target=sample_waits, args=(db_url(db), stop, waits[side]))
                th.start()
                ws.start()
                t0 = time.perf_counter()
                end = t0 + min(slice_s, window - spent[side])
                while side == "pruned" and not done:
                    if owed[0] > 0:
                        wait = min(owed[0], end - time.perf_counter())
                        if wait > 0:
                            stop.wait(wait)
                            owed[0] -= wait
                        if owed[0] > 0:
                            break  # the slice ended mid-rest: the rest goes on next slice
                    if time.perf_counter() >= end:
                        break
                    batch = pruner.tick()
                    assert batch is not None
                    deleted += batch.runs
                    batches += 1
                    if batches == 20:
                        explained = explain_claim(role_url(db, role))
                    done = not batch.full and batch.runs == 0
                left = end - time.perf_counter()
                if left > 0:
                    stop.wait(left)
                stop.set()
                th.join()
                ws.join()
                spent[side] += time.perf_counter() - t0
                loads.append(load())
            print(f"paced {limit} duty {dut_s(duty)}, interleaved in {slice_s:g} s slices with"
                  f" the baseline: pruned {deleted} runs in {batches} batches over"
                  f" {spent['pruned']:.0f} s of its slices ({deleted / spent['pruned']:.1f}"
                  f" runs/s, {deleted / spent['pruned'] * 3600:.0f} runs/h),"
                  f" {100 * pruner.busy_s / spent['pruned']:.2f} % of that time in batches"
                  f" ({1000 * pruner.busy_s / max(1, batches):.0f} ms a batch on average);"
                  f" baseline {spent['baseline']:.0f} s; claim EXPLAIN at batch 20 {explained}",
                  flush=True)
            print(f"  load average (1 min) at slice ends: {' '.join(loads)}", flush=True)
            for side in ("pruned", "baseline"):
                print(f"  {side} claim backend samples: " + ", ".join(
                    f"{k} {v}" for k, v in sorted(waits[side].items(),
                                                  key=lambda kv: -kv[1])[:8]), flush=True)
            a, b = lat["pruned"], lat["baseline"]
            print(f"claims: baseline n={len(b)} p50 {pct(b, 50):.2f} p99 {pct(b, 99):.2f} ms;"
                  f" pruned n={len(a)} p50 {pct(a, 50):.2f} p99 {pct(a, 99):.2f} ms;"
                  f" p99 ratio {pct(a, 99) / pct(b, 99):.2f}", flush=True)
            t1, rest = time.perf_counter(), PacedPruner(engine, "bench", limit=2000, duty=1)
            drained = 0
            while not done:
                batch = rest.tick()
                assert batch is not None
                drained += batch.runs
                done = not batch.full and batch.runs == 0
            print(f"the other {drained} runs pruned with no claims in"
                  f" {time.perf_counter() - t1:.0f} s (load {load()})", flush=True)
        finally:
            engine.dispose()
        after, before = sizes(pruned_db), sizes(base_db)
    for t in TABLES:
        print(f"    {t:12} after VACUUM: kept history {before[t] / 2**20:8.1f} MiB,"
              f" pruned {after[t] / 2**20:8.1f} MiB")


def main() -> None:
    from qinglong.control.history.prune import DUTY_DEFAULT
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--") and not _is_value(a, sys.argv)]
    window = float(sys.argv[sys.argv.index("--window") + 1]) if "--window" in flags else None
    slice_s = float(sys.argv[sys.argv.index("--slice") + 1]) if "--slice" in flags else 30.0
    runs = int(args[0]) if len(args) > 0 else 100_000
    tasks = int(args[1]) if len(args) > 1 else 100
    # LIMIT and DUTY may each list several values (comma-separated): one paced phase each
    limits = [int(v) for v in (args[2] if len(args) > 2 else "100").split(",")]
    duties = [float(v) for v in (args[3] if len(args) > 3 else str(DUTY_DEFAULT)).split(",")]
    plan = [] if "--no-back-to-back" in flags else [("back-to-back 500", 500, 1.0)]
    plan += [(f"paced {lim} duty {dut_s(dut)}", lim, dut) for lim in limits for dut in duties]
    with migrated_database("ql3b_hist") as (template, role):
        t0 = time.perf_counter()
        print(f"load {load()}", flush=True)
        seed(template, runs, tasks)
        print(f"seeded {runs} runs over {tasks} tasks in {time.perf_counter() - t0:.1f} s"
              f" (load {load()})", flush=True)
        if window is not None:
            interleaved(template, role, limits[0], duties[0], window, slice_s)
            return
        phases = {}
        for name, lim, dut in plan:
            phases[name] = pruned_phase(template, role, lim, dut)
            lat, wall, deleted, _, waits, explained, note = phases[name]
            print(f"{name}: pruned {deleted} runs in {wall:.1f} s ({deleted / wall:.0f} runs/s)"
                  f"; {note}; claim EXPLAIN mid-way {explained}", flush=True)
            print("  claim backend samples: " + ", ".join(
                f"{k} {v}" for k, v in sorted(waits.items(), key=lambda kv: -kv[1])[:8]),
                flush=True)
        wall_b = max(p[1] for p in phases.values())
        with cloned_database(template) as base_db:
            stop, lat_b = threading.Event(), list[float]()
            print(f"baseline claim EXPLAIN {explain_claim(role_url(base_db, role))}")
            th = threading.Thread(target=claims, args=(role_url(base_db, role), stop, lat_b))
            waits_b = dict[str, int]()
            ws = threading.Thread(target=sample_waits, args=(db_url(base_db), stop, waits_b))
            load0 = load()
            th.start()
            ws.start()
            time.sleep(wall_b)
            stop.set()
            th.join()
            ws.join()
            print(f"baseline: {wall_b:.0f} s, load {load0} -> {load()}")
            before = sizes(base_db)
            print("  claim backend samples: " + ", ".join(
                f"{k} {v}" for k, v in sorted(waits_b.items(), key=lambda kv: -kv[1])[:8]))
    print(f"claims: baseline n={len(lat_b)} p50 {pct(lat_b, 50):.2f} p99 {pct(lat_b, 99):.2f} ms")
    for name, (lat, _, _, after, _, _, _) in phases.items():
        print(f"  {name}: n={len(lat)} p50 {pct(lat, 50):.2f} p99 {pct(lat, 99):.2f} ms;"
              f" p99 ratio {pct(lat, 99) / pct(lat_b, 99):.2f}")
        for t in TABLES:
            print(f"    {t:12} after VACUUM: kept history {before[t] / 2**20:8.1f} MiB,"
                  + (f" pruned {after[t] / 2**20:8.1f} MiB" if after else " pruned: not"
                     " measured (partly pruned)"))


def _is_value(arg: str, argv: list[str]) -> bool:
    """True when ``arg`` is the value of ``--window`` or ``--slice``."""
    i = argv.index(arg)
    return any(f in argv and argv.index(f) + 1 == i for f in ("--window", "--slice"))


def dut_s(duty: float) -> str:
    return f"{duty:g}"


if __name__ == "__main__":
    main()
