"""Live cluster logs, control's side (docs/protocols.md §4.9): follow latency through two
replicas, and what a flood of chunks costs control and PostgreSQL. Printed, never asserted.

Real ``ql3 control serve`` replicas (c1, c2) on a fresh database and moto. ``latency`` and
``flood`` use the scripted sender of ``integration/cluster/live_log_kit.py``, so their
figures are control's: chunk POST → row → NOTIFY → LISTEN fan-out → Server-Sent Event;
``real`` runs the real ``ql3 worker run``.

latency:  one attempt; a line every 100 ms, each sent as its own chunk to c1 the moment it
          is "written" (the worker's own flush delay, ≤ 1 s by protocol, is not in it);
          1 and then 20 SSE followers, spread over c1 and c2. Per line and follower: the time
          from the write to the follower's read (one process, one monotonic clock).
          Baseline in the same run: the chunk POST's own round trip.
real:     the same with the real ``ql3 worker run`` and a task printing ``line N <wall
          clock>`` every 100 ms: write → read including the worker's flush (baseline: its
          flush_ms, 1 s).
flood:    A attempts (default 20) each offered 1 MB/s for S seconds (default 10), sent once a
          second per attempt under the worker's per-attempt limit (64 KiB/s sustained, burst
          1 MiB; the rest as a ``skipped`` gap). Printed: bytes offered (the tasks' own write
          rate: the baseline), stored, gap bytes, control CPU per stored MB, WAL bytes
          (``pg_stat_wal``: cluster-wide, so other databases' writes count too), the chunk
          table's size and dead tuples, and chunk rows left after every attempt completed
          with a verified log (goal 0).

``--before-live-log FILE [--rounds N]``: only the real worker's ticker, alternating a
worker whose ``qinglong.worker.live_log`` is FILE's code with this build's; write → read
and the attempt's log-chunk requests (the replicas' ``/metrics``) of each.

Usage: .venv/bin/python bench/live_logs.py [--lines N (100)] [--attempts A (20; 0: no flood)]
                                           [--seconds S (10)] [--before-live-log FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _dir in (ROOT / "bench", ROOT / "integration", ROOT / "integration" / "cluster",
             ROOT / "integration" / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

from cluster_kit import Cluster, ClusterDb  # noqa: E402
from live_log_kit import ScriptedWorker, manual_task  # noqa: E402
from s3_services import CREDS, moto_server, new_bucket  # noqa: E402

from proc_stats import cpu_s  # noqa: E402

BURST, RATE = 1024 * 1024, 64 * 1024


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _follower(url: str, token: str, attempt: str, seen: dict[int, float],
              stop: threading.Event) -> None:
    import httpx

    with httpx.stream("GET", f"{url}/v1/attempts/{attempt}/log",
                      params={"follow": 1, "from": "head"},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                now = time.monotonic()
                data = json.loads(line[6:])
                for text_line in data.get("t", "").splitlines():
                    if text_line.startswith("line "):
                        seen.setdefault(int(text_line.split()[1]), now)
            if stop.is_set() or '"status"' in line:
                return


def latency(cluster: Cluster, urls: list[str], admin: str, viewer: str, worker_token: str,
            lines: int, followers: int) -> dict[str, float]:
    """p50/p95 write → read in ms for ``followers`` SSE clients; the POST round trip."""
    manual_task(cluster, urls[0], admin)
    worker = ScriptedWorker(urls[0], worker_token, name=f"lat{followers}")
    lease = worker.claim()
    stop = threading.Event()
    seen: list[dict[int, float]] = [{} for _ in range(followers)]
    threads = [threading.Thread(target=_follower, args=(
        urls[i % len(urls)], viewer, lease.attempt_id, seen[i], stop), daemon=True)
        for i in range(followers)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # followers connected (a bench, not a test)
    written: dict[int, float] = {}
    rtts: list[float] = []
    offset = 0
    with worker.kept_alive(lease):
        for n in range(lines):
            data = f"line {n} {'x' * 60}\n".encode()
            written[n] = time.monotonic()
            worker.send(lease, offset, data)
            rtts.append((time.monotonic() - written[n]) * 1000)
            offset += len(data)
            time.sleep(max(0.0, written[n] + 0.1 - time.monotonic()))
        time.sleep(2.5)
    stop.set()
    worker.complete(lease, outcome="succeeded")
    delays = [(s[n] - written[n]) * 1000 for s in seen for n in written if n in s]
    missing = sum(1 for s in seen for n in written if n not in s)
    worker.http.close()
    return {"followers": followers, "p50_ms": _pct(delays, 0.5), "p95_ms": _pct(delays, 0.95),
            "missing": missing, "post_rtt_p50_ms": statistics.median(rtts)}


def _real_follower(url: str, token: str, attempt: str, seen: dict[int, float],
                   stop: threading.Event) -> None:
    """Record, per ``line N T`` (T: the task's wall clock at the write, s), the delay to
    this client's read in ms."""
    import httpx

    with httpx.stream("GET", f"{url}/v1/attempts/{attempt}/log",
                      params={"follow": 1, "from": "head"},
                      headers={"Authorization": f"Bearer {token}"}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                now = time.time()
                for text_line in json.loads(line[6:]).get("t", "").splitlines():
                    parts = text_line.split()
                    if len(parts) == 3 and parts[0] == "line":
                        seen.setdefault(int(parts[1]), (now - float(parts[2])) * 1000)
            if stop.is_set() or '"status"' in line:
                return


def _chunk_posts(urls: list[str]) -> float:
    """``POST /v1/worker/log-chunk`` requests the replicas have answered so far."""
    from dispatch_ours import request_stats

    return sum(st["count"] for key, st in request_stats(urls).items()
               if key.startswith("POST /v1/worker/log-chunk"))


def real_latency(cluster: Cluster, urls: list[str], admin: str, viewer: str,
                 worker_token: str, lines: int, followers: int, tag: str = "",
                 command: list[str] | None = None) -> dict[str, float]:
    """The real ``ql3 worker run``: a task printing ``line N <wall clock>`` every 100 ms,
    followed by ``followers`` SSE clients over both replicas; p50/p95 write → read in ms
    (the worker's flush included), and the log-chunk requests of its attempt. ``command``:
    what runs as ``ql3`` for the worker (another build's sender, ``tag`` naming it)."""
    posts = _chunk_posts(urls)
    worker = cluster.start_worker(f"real{followers}{tag}", worker_token, urls[0],
                                  concurrency=1, labels="zone=a",
                                  **({"command": command} if command else {}))
    name = f"real-{followers}{tag}"
    with cluster.api(urls[0], admin) as api:
        r = api.post("/v1/tasks", json={
            "name": name, "labels": {"zone": "a"}, "max_attempts": 1, "shell": (
                f"n=0; while [ $n -lt {lines} ]; do echo \"line $n $(date +%s.%N)\"; "
                "n=$((n+1)); sleep 0.1; done")})
        assert r.status_code == 201, r.text
        run_id = api.post(f"/v1/tasks/{name}/run").json()["id"]
        attempt = None
        for _ in range(300):
            view = api.get(f"/v1/runs/{run_id}").json()
            if view["attempts"]:
                attempt = view["attempts"][0]["id"]
                break
            time.sleep(0.1)
    assert attempt is not None, worker.log()[-2000:]
    stop = threading.Event()
    seen: list[dict[int, float]] = [{} for _ in range(followers)]
    threads = [threading.Thread(target=_real_follower, args=(
        urls[i % len(urls)], viewer, attempt, seen[i], stop), daemon=True)
        for i in range(followers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(lines * 0.1 + 60)
    stop.set()
    worker.terminate()
    delays = [d for s in seen for n, d in s.items() if n >= 10]  # past the followers' start
    missing = sum(1 for s in seen for n in range(lines) if n not in s)
    return {"followers": followers, "p50_ms": _pct(delays, 0.5), "p95_ms": _pct(delays, 0.95),
            "missing": missing, "chunk_posts": _chunk_posts(urls) - posts}


def flood(cluster: Cluster, urls: list[str], admin: str, worker_token: str, attempts: int,
          seconds: int, controls: list[Any]) -> dict[str, float]:
    """Bytes offered/stored/gapped and the costs of ``attempts`` writers at 1 MB/s each."""
    leases, workers = [], []
    for i in range(attempts):
        manual_task(cluster, urls[0], admin)
        worker = ScriptedWorker(urls[i % len(urls)], worker_token, name=f"fl{i}")
        leases.append(worker.claim())
        workers.append(worker)
    db = cluster.db.connect()
    wal0 = db.execute("SELECT wal_bytes FROM pg_stat_wal").fetchone()[0]  # type: ignore[index]
    cpu0 = sum(cpu_s(c.popen.pid) for c in controls)
    offered = stored = gapped = 0
    ends = [0] * attempts
    tokens = [float(BURST)] * attempts
    t0 = time.monotonic()
    for second in range(seconds):
        for i, (worker, lease) in enumerate(zip(workers, leases, strict=True)):
            pending = 1_000_000
            offered += pending
            tokens[i] = min(float(BURST), tokens[i] + (RATE if second else 0))
            send = int(min(tokens[i], pending))
            tokens[i] -= send
            skip = pending - send
            at = ends[i] + skip
            gapped += skip
            first = True
            for piece in range(0, send, 65536):
                chunk = os.urandom(min(65536, send - piece))  # incompressible, as logs are not
                worker.send(lease, at, chunk, skipped=first and skip > 0)
                first = False
                at += len(chunk)
                stored += len(chunk)
            if send == 0 and skip:
                worker.send(lease, at, b"", skipped=True)
            ends[i] = at
            worker.heartbeat(lease)
        time.sleep(max(0.0, t0 + second + 1 - time.monotonic()))
    span = time.monotonic() - t0
    cpu = sum(cpu_s(c.popen.pid) for c in controls) - cpu0
    wal = float(db.execute("SELECT wal_bytes FROM pg_stat_wal").fetchone()[0] - wal0)  # type: ignore[index]
    size = db.execute("SELECT pg_total_relation_size('attempt_log_chunks')").fetchone()[0]  # type: ignore[index]
    db.execute("ANALYZE attempt_log_chunks")
    dead = db.execute("SELECT n_dead_tup FROM pg_stat_user_tables"
                      " WHERE relname = 'attempt_log_chunks'").fetchone()[0]  # type: ignore[index]
    for worker, lease, end in zip(workers, leases, ends, strict=True):
        done = worker.complete(lease, body=b"y" * min(end, 4_000_000), layout=None
                               if end <= 4_000_000 else {"raw_bytes": end,
                                                         "head_bytes": 2_000_000,
                                                         "tail_offset": end - 2_000_000})
        if done.status_code != 200:  # the capped body must hold head + tail exactly
            print("completion:", done.status_code, done.text[:200])
        worker.http.close()
    left = db.execute("SELECT count(*) FROM attempt_log_chunks WHERE attempt_id = ANY(%s)",
                      ([lease.attempt_id for lease in leases],)).fetchone()[0]  # type: ignore[index]
    db.close()
    return {"attempts": attempts, "seconds": round(span, 1), "offered_mb_s": offered / span / 1e6,
            "stored_mb_s": stored / span / 1e6, "gap_mb": gapped / 1e6,
            "control_cpu_ms_per_mb": cpu * 1000 / max(stored / 1e6, 1e-9),
            "wal_mb": wal / 1e6, "wal_per_stored": wal / max(stored, 1),
            "table_mb": size / 1e6, "dead_tuples": dead, "rows_left": left}


def before_after(cluster: Cluster, urls: list[str], admin: str, viewer: str,
                 worker_token: str, args: argparse.Namespace) -> None:
    """``--before-live-log``: the real worker's ticker with 1 follower, alternating the
    sender of ``args.before_live_log`` (before) with this build's (after)."""
    boot = ("import sys; sys.argv[0] = 'ql3'; import qinglong.worker.live_log as m; "
            f"f = {str(args.before_live_log)!r}; "
            "exec(compile(open(f).read(), f, 'exec'), m.__dict__); "
            "from qinglong.local.app.cli import entry; entry()")
    out: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(args.rounds):
        for build, command in (("before", [sys.executable, "-c", boot]), ("after", None)):
            r = real_latency(cluster, urls, admin, viewer, worker_token, args.lines, 1,
                             tag=f"-{build}{i}", command=command)
            out[build].append(r)
            print(f"{build}, round {i}: p50 {r['p50_ms']:.0f} ms, p95 {r['p95_ms']:.0f} ms, "
                  f"missing {r['missing']}, log-chunk requests {r['chunk_posts']:.0f} for "
                  f"{args.lines} lines")
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--attempts", type=int, default=20)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--before-live-log", type=Path, default=None, metavar="FILE",
                        help="only the real worker's figures, alternating this build's "
                             "sender with FILE (another build's worker/live_log.py)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from qinglong.control.retention.objects import make_client

    with moto_server() as endpoint, tempfile.TemporaryDirectory() as tmp:
        db = ClusterDb.create()
        bucket = new_bucket(make_client(endpoint, timeout_s=5, **CREDS), versioned=True)
        cluster = Cluster(Path(tmp), db, endpoint, bucket)
        try:
            admin, viewer = cluster.token("admin"), cluster.token("viewer")
            worker_token = cluster.token("worker", pool="default", labels="zone=a")
            controls = [cluster.start_control(f"c{i}", lease_ms=30_000, heartbeat_ms=10_000)
                        for i in (1, 2)]
            urls = [str(c.url) for c in controls]
            results: dict[str, Any] = {}
            if args.before_live_log:
                before_after(cluster, urls, admin, viewer, worker_token, args)
                return
            for n in (1, 20):
                r = latency(cluster, urls, admin, viewer, worker_token, args.lines, n)
                results[f"latency_{n}"] = r
                print(f"latency, {n:2d} follower(s): p50 {r['p50_ms']:.0f} ms, p95 "
                      f"{r['p95_ms']:.0f} ms, missing {r['missing']}; baseline chunk POST "
                      f"p50 {r['post_rtt_p50_ms']:.0f} ms")
            for n in (1, 20):
                r = real_latency(cluster, urls, admin, viewer, worker_token, args.lines, n)
                results[f"real_worker_latency_{n}"] = r
                print(f"real worker, {n:2d} follower(s): p50 {r['p50_ms']:.0f} ms, p95 "
                      f"{r['p95_ms']:.0f} ms, missing {r['missing']}; baseline: the "
                      "worker's flush_ms 1000 ms")
            if args.attempts == 0:
                print(json.dumps(results))
                return
            f = flood(cluster, urls, admin, worker_token, args.attempts, args.seconds,
                      controls)
            results["flood"] = f
            print(f"flood, {f['attempts']} attempts x {f['seconds']} s: offered "
                  f"{f['offered_mb_s']:.1f} MB/s (baseline), stored {f['stored_mb_s']:.2f} "
                  f"MB/s, gap {f['gap_mb']:.0f} MB, control CPU "
                  f"{f['control_cpu_ms_per_mb']:.0f} ms/MB, WAL {f['wal_mb']:.1f} MB "
                  f"({f['wal_per_stored']:.2f} per stored byte), table {f['table_mb']:.1f} MB,"
                  f" dead tuples {f['dead_tuples']}, rows left {f['rows_left']}")
            print(json.dumps(results))
        finally:
            cluster.close()
            db.drop()


if __name__ == "__main__":
    main()
