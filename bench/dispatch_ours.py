"""Our side of ``bench/dispatch.py``: real ``ql3 control serve`` replicas and ``ql3 worker run``
processes on a fresh database (``integration/cluster/cluster_kit.py``) and a fresh versioned
bucket on moto, a batch of runs of one ``true`` task queued through the API's "run now"
endpoint, and the exactly-once check read back from the database.

The path is the real one end to end: ``POST /v1/tasks/bench-true/run`` (operator token) makes
each queued run in its own transaction, as a person or a panel would; workers claim, spawn
the group wrapper, report ``started``, ask a log-upload grant, PUT the log to the bucket and
complete (control HEADs the object). Control uses its default lease and heartbeat (30 s /
10 s). Imported only by the bench.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _dir in (ROOT / "integration", ROOT / "integration" / "cluster", ROOT / "integration" / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

from cluster_kit import QL3, Cluster, ClusterDb, Proc, wait_for  # noqa: E402
from s3_services import CREDS, new_bucket  # noqa: E402

from proc_stats import TICK_S, rss_kib  # noqa: E402

TASK = "bench-true"
TERMINAL = ("succeeded", "failed", "cancelled", "timed_out", "lost")


@dataclass(frozen=True)
class OursResult:
    """One measured batch: ``runs`` queued, ``span_s`` from the first run's ``created_at`` to
    the last one's ``finished_at`` (database clock), ``enqueue_s`` between the first and the
    last ``created_at``, ``cpu_s`` CPU seconds by component over the batch (control replicas,
    workers with their reaped children, PostgreSQL backends of the database) and
    ``problems`` (empty when every run's one attempt started and completed exactly once)."""

    runs: int
    span_s: float
    enqueue_s: float
    cpu_s: dict[str, float]
    phase_ms: dict[str, float]
    requests: dict[str, dict[str, float]]
    problems: tuple[str, ...]
    attempts_cpu_s: float = 0.0
    """Of ``cpu_s["workers"]``: the CPU of the workers' reaped children (the group wrapper
    and the task of each attempt), seconds over the batch."""
    rss_mib: dict[str, float] = field(default_factory=dict)
    """Resident set size (VmRSS) of each replica and worker process at the batch's end, MiB,
    by name (``c0``, ``w0``, ...): the worker's own process, not its attempts'."""


def cpu_with_children_s(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` in seconds (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / TICK_S


def children_cpu_s(pid: int) -> float:
    """cutime + cstime of ``pid`` in seconds: its reaped children's CPU (a worker's: the
    group wrappers and the tasks they ran); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[13:15]) / TICK_S


def backend_cpu_s(cluster: Cluster) -> float:
    """CPU seconds of the PostgreSQL backends connected to the cluster's database now."""
    with cluster.db.connect() as conn:
        pids = [r[0] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (cluster.db.name,))]
    return sum(cpu_with_children_s(pid) for pid in pids)


def moto_pid(endpoint: str) -> int | None:
    """The pid of this process's child ``python -m moto.server`` serving ``endpoint``."""
    port = endpoint.rsplit(":", 1)[1]
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat") as fh:
                ppid = int(fh.read().rpartition(")")[2].split()[1])
        except OSError:
            continue
        if ppid == os.getpid() and b"moto.server" in argv and port.encode() in argv:
            return int(name)
    return None


def _snapshot(cluster: Cluster, controls: list[Proc], workers: list[Proc]) -> dict[str, float]:
    moto = moto_pid(cluster.s3_endpoint)
    return {"control": sum(cpu_with_children_s(p.popen.pid) for p in controls),
            "workers": sum(cpu_with_children_s(p.popen.pid) for p in workers),
            "postgres": backend_cpu_s(cluster),
            "moto": cpu_with_children_s(moto) if moto is not None else float("nan")}


@contextmanager
def sampled(procs: list[Proc], profile_dir: Path | None, tag: str) -> Iterator[None]:
    """With ``profile_dir``: ``py-spy record`` of every process in ``procs`` while the block
    runs, written to ``profile_dir/<tag>-<name>.txt`` as collapsed stacks; only the thread
    holding the GIL is sampled (``--gil``): where the Python code spends CPU.
    py-spy comes from env ``PY_SPY`` or PATH (not a dependency of the project)."""
    if profile_dir is None:
        yield
        return
    exe = os.environ.get("PY_SPY") or shutil.which("py-spy")
    if exe is None:
        raise RuntimeError("--profile needs py-spy (env PY_SPY or on PATH)")
    profile_dir.mkdir(parents=True, exist_ok=True)
    spies = [subprocess.Popen([exe, "record", "-p", str(p.popen.pid), "-r", "200", "-f", "raw",
                               "--gil", "-o", str(profile_dir / f"{tag}-{p.name}.txt")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for p in procs]
    time.sleep(0.5)  # attached before the batch starts
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(30)


def _cluster(tmp: Path, moto: str, command: Sequence[str]) -> Cluster:
    """A fresh cluster (database, versioned bucket) for one batch of the build that runs as
    ``command``: its database migrated by that build's own ``ql3 control migrate``, so a
    build at another migration count gets a schema its ``control serve`` accepts."""
    from qinglong.control.retention.objects import make_client

    tmp.mkdir(parents=True, exist_ok=True)
    db = ClusterDb.create(command=command)
    return Cluster(tmp, db, moto,
                   new_bucket(make_client(moto, timeout_s=5, **CREDS), versioned=True))


def _token(cluster: Cluster, command: Sequence[str], scope: str,
           pool: str | None = None) -> str:
    """A token of ``scope`` issued by the build that runs as ``command`` (this checkout's in
    process, another build's ``ql3 control token create`` as a subprocess: its own code on
    its own schema)."""
    if tuple(command) == (QL3,):
        return cluster.token(scope, pool=pool)
    args = ["control", "token", "create", "--database-url", cluster.db.owner_url,
            "--name", f"{scope}-{os.urandom(3).hex()}", "--scope", scope, "--json",
            *(["--pool", pool] if pool is not None else [])]
    token: str = json.loads(cluster.ql3(*args, command=command).stdout)["token"]
    return token


_HIST = re.compile(r'^ql3_http_request_duration_seconds_(count|sum)\{(.*)\} (\S+)$')


def request_stats(urls: list[str]) -> dict[str, dict[str, float]]:
    """Requests per route summed over the replicas' ``/metrics``: ``{"POST /v1/...":
    {"count": n, "mean_ms": m}}`` (the latency histogram's count and sum)."""
    import httpx

    acc: dict[str, list[float]] = {}
    for url in urls:
        for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
            m = _HIST.match(line)
            if m is None:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            key = (f"{labels.get('method', '?')} {labels.get('route', '?')} "
                   f"{labels.get('status', '?')}")
            slot = acc.setdefault(key, [0.0, 0.0])
            slot[0 if m.group(1) == "count" else 1] += float(m.group(3))
    return {k: {"count": c, "mean_ms": round(1000 * t / c, 1) if c else 0.0}
            for k, (c, t) in sorted(acc.items()) if c}


def run_ours(tmp: Path, moto: str, *, replicas: int, workers: int, concurrency: int,
             runs: int, threads: int, timeout_s: float,
             profile_dir: Path | None = None, argv: Sequence[str] = ("true",),
             command: Sequence[str] = (QL3,), tag: str = "ours") -> OursResult:
    """One batch on a fresh cluster of ``replicas`` control replicas and ``workers`` workers
    (``concurrency`` attempts each; worker i tries the replicas' URLs from replica i on, so
    workers spread over replicas); ``runs`` runs queued by ``threads`` API clients (client
    j through replica j mod ``replicas``). Everything started is stopped and the database
    dropped. Raises AssertionError when a process does not start or the batch does not end
    within ``timeout_s``. ``profile_dir``: sample every replica and worker (``sampled``).
    ``argv``: the task's command; ``command``: what runs as ``ql3`` (another build's)."""
    cluster = _cluster(tmp, moto, command)
    db = cluster.db
    try:
        controls = [cluster.start_control(f"c{i}", lease_ms=30_000, heartbeat_ms=10_000,
                                          wait=False, command=command) for i in range(replicas)]
        for control in controls:
            cluster.wait_ready(control)
        urls = [c.url or "" for c in controls]
        operator, admin = _token(cluster, command, "operator"), _token(cluster, command, "admin")
        token = _token(cluster, command, "worker", pool="bench")
        procs = [cluster.start_worker(f"w{i}", token,
                                      ",".join(urls[i % replicas:] + urls[:i % replicas]),
                                      concurrency=concurrency, command=command)
                 for i in range(workers)]
        with cluster.api(urls[0], admin) as api:
            r = api.post("/v1/tasks", json={"name": TASK, "argv": list(argv),
                                            "concurrency_policy": "allow"})
            assert r.status_code == 201, r.text
        with db.connect() as conn:
            registered = wait_for(lambda: conn.execute(
                "SELECT count(*) FROM worker_incarnations").fetchone()[0] >= workers, 30)
        assert registered, [p.log()[-2000:] for p in procs]
        with sampled(controls + procs, profile_dir, f"{tag}{replicas}"):
            before = _snapshot(cluster, controls, procs)
            kids0 = sum(children_cpu_s(p.popen.pid) for p in procs)
            _enqueue(cluster, urls, operator, runs, threads)
            done = _wait_terminal(cluster, runs, timeout_s)
            after = _snapshot(cluster, controls, procs)
            kids = sum(children_cpu_s(p.popen.pid) for p in procs) - kids0
        rss = {p.name: round(rss_kib(p.popen.pid) / 1024, 1) for p in controls + procs}
        requests = request_stats(urls)
        assert done, f"the batch did not end within {timeout_s} s"
        for proc in procs:
            proc.terminate()
        return replace(_verify(cluster, runs, {k: after[k] - before[k] for k in after},
                               requests), rss_mib=rss, attempts_cpu_s=kids)
    finally:
        cluster.close()
        db.drop()


def _enqueue(cluster: Cluster, urls: list[str], operator: str, runs: int,
             threads: int) -> None:
    clients = [cluster.api(urls[j % len(urls)], operator) for j in range(threads)]

    def post(i: int) -> None:
        r = clients[i % threads].post(f"/v1/tasks/{TASK}/run")
        if r.status_code != 201:
            raise AssertionError(f"run now answered {r.status_code}: {r.text}")

    try:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(post, range(runs)))
    finally:
        for client in clients:
            client.close()


def _wait_terminal(cluster: Cluster, runs: int, timeout_s: float) -> bool:
    with cluster.db.connect() as conn:
        def done() -> bool:
            row = conn.execute("SELECT count(*) FROM runs WHERE status = ANY(%s)",
                               (list(TERMINAL),)).fetchone()
            return bool(row and row[0] >= runs)

        return bool(wait_for(done, timeout_s, 0.05))


def _verify(cluster: Cluster, runs: int, cpu: dict[str, float],
            requests: dict[str, dict[str, float]]) -> OursResult:
    """Every run ``succeeded`` after exactly one attempt; every attempt ``succeeded`` with
    exactly one ``attempt_running`` (started) and one ``attempt_completed`` event, its run
    exactly one ``run_finished``; one log artifact per attempt, or none when it completed
    without output (``no_output``: ``true`` from a worker and replica of wire 2)."""
    problems: list[str] = []
    with cluster.db.connect() as conn:
        status = dict(conn.execute(
            "SELECT status, count(*) FROM runs GROUP BY 1").fetchall())
        if status != {"succeeded": runs}:
            problems.append(f"run statuses {status}, expected {runs} succeeded")
        row: Any = conn.execute(
            "SELECT count(*) FILTER (WHERE r.attempt_count <> 1),"
            "       count(*) FILTER (WHERE (SELECT count(*) FROM attempts a"
            "                               WHERE a.run_id = r.id) <> 1)"
            " FROM runs r").fetchone()
        if row[0] or row[1]:
            problems.append(f"{row[0]} runs with attempt_count <> 1, {row[1]} runs without "
                            "exactly one attempt")
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE a.status <> 'succeeded' OR a.started_at IS NULL),"
            "       count(*) FILTER (WHERE e.started <> 1 OR e.completed <> 1"
            "                          OR e.finished <> 1),"
            "       count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM"
            "                        run_attempt_log_artifacts l WHERE l.attempt_id = a.id)"
            "                        AND NOT coalesce((a.completion ->> 'no_output')::boolean,"
            "                                         false))"
            " FROM attempts a CROSS JOIN LATERAL (SELECT"
            "   count(*) FILTER (WHERE kind = 'attempt_running') AS started,"
            "   count(*) FILTER (WHERE kind = 'attempt_completed') AS completed,"
            "   count(*) FILTER (WHERE kind = 'run_finished') AS finished"
            "   FROM events WHERE attempt_id = a.id) e").fetchone()
        if any(row):
            problems.append(f"{row[0]} attempts not succeeded or never started, {row[1]} "
                            f"without exactly one start/completion/finish event, {row[2]} "
                            "without a log")
        phases = conn.execute(
            "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY"
            "         extract(epoch FROM a.claimed_at - r.created_at)),"
            "       percentile_cont(0.5) WITHIN GROUP (ORDER BY"
            "         extract(epoch FROM a.started_at - a.claimed_at)),"
            "       percentile_cont(0.5) WITHIN GROUP (ORDER BY"
            "         extract(epoch FROM a.finished_at - a.started_at))"
            " FROM attempts a JOIN runs r ON r.id = a.run_id").fetchone()
        span = conn.execute(
            "SELECT extract(epoch FROM max(finished_at) - min(created_at)),"
            "       extract(epoch FROM max(created_at) - min(created_at)) FROM runs"
        ).fetchone()
    assert span is not None
    assert phases is not None
    phase_ms = {name: round(1000 * float(v or 0), 1) for name, v in
                zip(("queued", "claimed_to_started", "started_to_completed"), phases,
                    strict=True)}
    return OursResult(runs, float(span[0] or 0), float(span[1] or 0), cpu, phase_ms,
                      requests, tuple(problems))


@dataclass(frozen=True)
class EnqueueResult:
    """One ``--enqueue`` batch: ``runs`` run-now requests of one ``allow`` task from
    ``threads`` clients. ``wall_s``: first request sent .. last answer read (wall clock);
    ``db_span_s``: first .. last ``runs.created_at``; ``latency_ms``: p50 / p95 / max of one
    request; ``floor_wall_s`` and ``floor_ms``: the same number of ``GET /v1/tasks/<name>``
    (token check, one read) from the same clients, the HTTP floor of the same run;
    ``problems``: empty when the task's numbers are exactly 1..runs, one run each."""

    runs: int
    wall_s: float
    db_span_s: float
    latency_ms: dict[str, float]
    floor_wall_s: float
    floor_ms: dict[str, float]
    problems: tuple[str, ...]


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    if not ordered:
        return {}
    def at(q: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)
    return {"p50": at(0.5), "p95": at(0.95), "max": round(1000 * ordered[-1], 1)}


def _burst(clients: list[Any], threads: int, runs: int, send: Any) -> tuple[float, list[float]]:
    """``runs`` calls of ``send(client)`` over ``threads`` threads; (wall s, latencies s)."""
    latencies: list[float] = []

    def one(i: int) -> None:
        t0 = time.perf_counter()
        send(clients[i % threads])
        latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(runs)))
    return time.perf_counter() - start, latencies


def run_enqueue(tmp: Path, moto: str, *, replicas: int, runs: int, threads: int,
                keyed: bool = True, command: Sequence[str] = (QL3,)) -> EnqueueResult:
    """``runs`` "run now" requests of one ``allow`` task from ``threads`` clients (client j
    through replica j mod ``replicas``), no workers, on a fresh cluster; each request with
    a fresh ``Idempotency-Key`` when ``keyed`` (as ``ql3 cluster run`` sends; a control
    without the header support ignores it). The floor first: as many task reads.
    ``command``: what runs as ``ql3`` (another build's)."""
    import uuid

    cluster = _cluster(tmp, moto, command)
    db = cluster.db
    try:
        controls = [cluster.start_control(f"c{i}", lease_ms=30_000, heartbeat_ms=10_000,
                                          wait=False, command=command) for i in range(replicas)]
        for control in controls:
            cluster.wait_ready(control)
        urls = [c.url or "" for c in controls]
        operator, admin = _token(cluster, command, "operator"), _token(cluster, command, "admin")
        with cluster.api(urls[0], admin) as api:
            r = api.post("/v1/tasks", json={"name": TASK, "argv": ["true"],
                                            "concurrency_policy": "allow"})
            assert r.status_code == 201, r.text
        clients = [cluster.api(urls[j % len(urls)], operator) for j in range(threads)]
        try:
            def read(client: Any) -> None:
                r = client.get(f"/v1/tasks/{TASK}")
                if r.status_code != 200:
                    raise AssertionError(f"task read answered {r.status_code}: {r.text}")

            def post(client: Any) -> None:
                headers = {"Idempotency-Key": str(uuid.uuid4())} if keyed else {}
                r = client.post(f"/v1/tasks/{TASK}/run", headers=headers)
                if r.status_code != 201:
                    raise AssertionError(f"run now answered {r.status_code}: {r.text}")

            floor_wall, floor_lat = _burst(clients, threads, runs, read)
            wall, lat = _burst(clients, threads, runs, post)
        finally:
            for client in clients:
                client.close()
        problems: list[str] = []
        with db.connect() as conn:
            numbers = [r[0] for r in conn.execute("SELECT number FROM runs ORDER BY number")]
            span = conn.execute("SELECT extract(epoch FROM max(created_at) - min(created_at))"
                                " FROM runs").fetchone()
        if numbers != list(range(1, runs + 1)):
            problems.append(f"{len(numbers)} runs, numbers not exactly 1..{runs}")
        return EnqueueResult(runs, wall, float(span[0] or 0) if span else 0.0,
                             _percentiles(lat), floor_wall, _percentiles(floor_lat),
                             tuple(problems))
    finally:
        cluster.close()
        db.drop()


@dataclass(frozen=True)
class LatencyResult:
    """One ``--latency`` batch: ``runs`` run-now requests sent ``spacing_s`` apart (so every
    one finds idle workers). ``started_ms``: p50 / p95 / max of ``attempts.started_at -
    runs.created_at`` (database clock: run made .. the worker's ``started`` recorded);
    ``claimed_ms``: the same up to the claim; ``problems``: empty when every run succeeded
    after exactly one attempt."""

    runs: int
    started_ms: dict[str, float]
    claimed_ms: dict[str, float]
    problems: tuple[str, ...]


def run_latency(tmp: Path, moto: str, *, replicas: int, workers: int, concurrency: int,
                runs: int, spacing_s: float, timeout_s: float,
                command: Sequence[str] = (QL3,)) -> LatencyResult:
    """``runs`` "run now" requests of one ``allow`` task, one every ``spacing_s`` seconds,
    alternating over ``replicas`` replicas, with ``workers`` idle workers (worker i first
    tries replica i mod ``replicas``, so a run is often made on a replica other than the
    one a worker waits on). Everything is stopped and the database dropped. ``command``:
    what runs as ``ql3`` (another build's)."""
    cluster = _cluster(tmp, moto, command)
    db = cluster.db
    try:
        controls = [cluster.start_control(f"c{i}", lease_ms=30_000, heartbeat_ms=10_000,
                                          wait=False, command=command) for i in range(replicas)]
        for control in controls:
            cluster.wait_ready(control)
        urls = [c.url or "" for c in controls]
        operator, admin = _token(cluster, command, "operator"), _token(cluster, command, "admin")
        token = _token(cluster, command, "worker", pool="bench")
        procs = [cluster.start_worker(f"w{i}", token,
                                      ",".join(urls[i % replicas:] + urls[:i % replicas]),
                                      concurrency=concurrency, command=command)
                 for i in range(workers)]
        with cluster.api(urls[0], admin) as api:
            r = api.post("/v1/tasks", json={"name": TASK, "argv": ["true"],
                                            "concurrency_policy": "allow"})
            assert r.status_code == 201, r.text
        with db.connect() as conn:
            registered = wait_for(lambda: conn.execute(
                "SELECT count(*) FROM worker_incarnations").fetchone()[0] >= workers, 30)
        assert registered, [p.log()[-2000:] for p in procs]
        time.sleep(3.0)  # every worker past its first (empty) claim: idle, as in production
        clients = [cluster.api(u, operator) for u in urls]
        try:
            for i in range(runs):
                t0 = time.monotonic()
                r = clients[i % len(clients)].post(f"/v1/tasks/{TASK}/run")
                assert r.status_code == 201, r.text
                time.sleep(max(0.0, spacing_s - (time.monotonic() - t0)))
        finally:
            for client in clients:
                client.close()
        done = _wait_terminal(cluster, runs, timeout_s)
        assert done, f"the batch did not end within {timeout_s} s"
        for proc in procs:
            proc.terminate()
        result = _verify(cluster, runs, {}, {})
        with db.connect() as conn:
            rows = conn.execute(
                "SELECT extract(epoch FROM a.started_at - r.created_at),"
                "       extract(epoch FROM a.claimed_at - r.created_at)"
                " FROM attempts a JOIN runs r ON r.id = a.run_id").fetchall()
        return LatencyResult(runs, _percentiles([float(s) for s, _ in rows]),
                             _percentiles([float(c) for _, c in rows]), result.problems)
    finally:
        cluster.close()
        db.drop()
