"""Objects retired per second by the retention sweeper: 1 vs 3 replica processes, with a ceiling.

Each replica is its own process (own SQLAlchemy engine, own boto3 client, own owner incarnation)
running ``RunAttemptLogRetentionSweeper.run_once()`` back to back (default Config: 16 claims and
16 deletes per sweep, lease 60 s) against moto's server. Phases, in the same run, each on its
own fresh migrated database and unversioned bucket (If-Match deletes after a ``safe`` probe):

- 1 replica, S3 through ``integration/s3/fault_proxy.py`` adding 20 ms to every request;
- 3 replicas, same proxy;
- ceiling: 3 replicas straight to moto (no proxy): what moto plus PostgreSQL allow here.

A replica's rate is the objects it retired (deleted or already_absent, tombstoned) divided by
the time from the common start to the end of its last sweep (sweeps are never cut); the phase
rate is the sum over replicas. Prints rates and the ratio 3-replicas/1-replica (issue 4
target: >= 2.4).
Usage: python bench/retention.py [SECONDS_PER_PHASE]
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration" / "control_s3"))

from bench_support import (
    CREDS,
    db_url,
    fault_proxy,
    migrated_database,
    moto_server,
    role_url,
)

LATENCY_MS = 20


def seed(db: str, client: Any, bucket: str, n: int) -> None:
    """``n`` finished remote attempts of one run, each with an uploaded log of about 3 KiB,
    recorded and enrolled the way a worker and the terminal transition leave them (the
    sweeper tier's own seeding, ``integration/control_s3/sweep_world.py``)."""
    from sweep_world import seed_logs

    from qinglong.control.db.engine import create_engine

    engine = create_engine(db_url(db), pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            seed_logs(conn, client, bucket, n, repeat=64)
    finally:
        engine.dispose()


def _replica(url: str, endpoint: str, bucket: str, index: int, start: float, seconds: float,
             out: Any) -> None:
    """One replica process: probe, then sweep back to back until ``start + seconds``.
    Reports (retired, seconds from start to the end of its last sweep, other counts, verdict)."""
    from collections import Counter

    from qinglong.control.db.engine import create_engine
    from qinglong.control.retention.claims import process_owner
    from qinglong.control.retention.objects import make_client
    from qinglong.control.retention.sweeper import RunAttemptLogRetentionSweeper as Sweeper

    engine = create_engine(url, pool_size=2, max_overflow=0)
    try:
        client = make_client(endpoint, timeout_s=10, **CREDS)
        sweeper = Sweeper(engine, client, process_owner(f"bench-{index}"),
                          probe_bucket=bucket, config=Sweeper.Config())
        verdict = sweeper.probe().status  # as start() does; also warms the HTTP connection
        while time.time() < start:
            time.sleep(0.001)
        t0 = time.perf_counter()
        counts: Counter[str] = Counter()
        retired, last_end = 0, 0.0
        while time.perf_counter() - t0 < seconds:
            result = sweeper.run_once()
            if result.claimed == 0:
                counts["ran_dry"] += 1
                break
            retired += result["deleted"] + result["already_absent"]
            counts.update({k: v for k, v in result.counts.items()
                           if k not in ("deleted", "already_absent")})
            last_end = time.perf_counter() - t0
        out.put((retired, last_end, dict(counts), verdict))
    finally:
        engine.dispose()


def phase(label: str, direct: Any, s3_endpoint: str, replicas: int, objects: int,
          seconds: float) -> float:
    """Seed a fresh database and bucket, run ``replicas`` processes, print and return obj/s."""
    bucket = f"ql3-bench-{uuid.uuid4().hex[:16]}"
    direct.create_bucket(Bucket=bucket)
    with migrated_database("ql3bench_ret") as (db, role):
        seed(db, direct, bucket, objects)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        start = time.time() + 3.0  # after every replica has imported, connected and probed
        procs = [ctx.Process(target=_replica, args=(role_url(db, role), s3_endpoint, bucket, i,
                                                    start, seconds, out))
                 for i in range(replicas)]
        for p in procs:
            p.start()
        results = [out.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join(30)
    rate = sum(n / t for n, t, _, _ in results if t > 0)
    other: dict[str, int] = {}
    for _, _, counts, _ in results:
        for k, v in counts.items():
            other[k] = other.get(k, 0) + v
    verdicts = sorted({v for _, _, _, v in results})
    print(f"{label:<44} {rate:8.1f} obj/s  (retired {sum(n for n, *_ in results)} of "
          f"{objects}; probe {','.join(verdicts)}; other {other or 'none'})")
    return rate


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
    from qinglong.control.retention.objects import make_client

    with moto_server() as moto, fault_proxy(moto, latency_ms=LATENCY_MS) as proxied:
        direct = make_client(moto, timeout_s=10, **CREDS)
        print(f"moto server {moto}; fault proxy {proxied} (+{LATENCY_MS} ms per request); "
              f"{seconds:g} s per phase; default sweeper Config (16 claims/sweep)")
        one = phase(f"1 replica, proxy +{LATENCY_MS} ms", direct, proxied, 1, 300, seconds)
        three = phase(f"3 replicas, proxy +{LATENCY_MS} ms", direct, proxied, 3, 700, seconds)
        ceiling = phase("ceiling: 3 replicas, moto direct (no proxy)", direct, moto, 3, 1000,
                        seconds * 0.6)
    print(f"ratio 3 replicas / 1 replica (proxied): {three / one:.2f}  (target >= 2.4)")
    print(f"3 replicas proxied / moto-direct ceiling: {three / ceiling:.2f}")


if __name__ == "__main__":
    main()
