"""procrastinate's side of ``bench/dispatch.py``: an app whose one task runs ``true`` as a
subprocess (the same work per job as our attempts), its worker processes, the enqueue and
the exactly-once check, all on a private database of its own on the same PostgreSQL.

procrastinate (>= 2.0, the dev extra) with its psycopg connector; the schema comes from its
own ``schema_manager.apply_schema()``. A worker is ``python bench/dispatch_procrastinate.py
CONNINFO NAME CONCURRENCY`` (``App.run_worker``: LISTEN/NOTIFY on, jobs kept, SIGTERM stops
it). Imported only by the bench, never by the runtime.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import procrastinate

CONNINFO_ENV = "QL3_BENCH_PROCRASTINATE_CONNINFO"
app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=os.environ.get(CONNINFO_ENV, "")))


@app.task(name="bench_true")
async def bench_true() -> None:
    """The job: ``true`` as a subprocess, waited for; a non-zero exit fails the job."""
    proc = await asyncio.create_subprocess_exec("true")
    if await proc.wait() != 0:
        raise RuntimeError(f"true exited {proc.returncode}")


@dataclass(frozen=True)
class ProcrastinateResult:
    """One measured batch: ``jobs`` deferred, ``span_s`` from the first ``deferred`` event to
    the last ``succeeded`` one (database clock), ``enqueue_s`` from the first to the last
    ``deferred`` event, and ``problems`` (empty when every job started and succeeded exactly
    once)."""

    jobs: int
    span_s: float
    enqueue_s: float
    problems: tuple[str, ...]


@contextmanager
def workers(conninfo: str, count: int, concurrency: int, log_dir: Path
            ) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` worker processes of ``app`` (``concurrency`` jobs each), each its own log
    file in ``log_dir``; stopped by SIGTERM (then SIGKILL after 15 s) on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    env = dict(os.environ, **{CONNINFO_ENV: conninfo})
    try:
        for i in range(count):
            with open(log_dir / f"procrastinate-w{i}.log", "ab") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, f"bench-w{i}", str(concurrency)],
                    env=env, stdout=log, stderr=log))
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def apply_schema(conninfo: str) -> None:
    """procrastinate's schema into the (empty) database of ``conninfo``."""
    with app.replace_connector(procrastinate.PsycopgConnector(conninfo=conninfo)), \
            app.open():
        app.schema_manager.apply_schema()


def wait_workers_ready(connect: Callable[[], Any], count: int, timeout_s: float) -> None:
    """Until ``count`` workers registered in ``procrastinate_workers`` (RuntimeError after
    ``timeout_s``)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with connect() as conn:
            row = conn.execute("SELECT count(*) FROM procrastinate_workers").fetchone()
        if row and row[0] >= count:
            return
        time.sleep(0.1)
    raise RuntimeError("procrastinate workers did not register")


def enqueue(conninfo: str, jobs: int, threads: int) -> None:
    """Defer ``jobs`` jobs of ``bench_true``, one ``defer()`` per call from ``threads``
    client threads sharing one sync pool."""
    connector = procrastinate.PsycopgConnector(conninfo=conninfo, min_size=threads,
                                               max_size=threads)
    with app.replace_connector(connector), app.open(), ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda _: bench_true.defer(), range(jobs)))


def verify(connect: Callable[[], Any], jobs: int) -> ProcrastinateResult:
    """Read the batch back: every job ``succeeded`` with one attempt, one ``started`` and one
    ``succeeded`` event each; the span from the events' times."""
    with connect() as conn:
        status = dict(conn.execute(
            "SELECT status::text, count(*) FROM procrastinate_jobs GROUP BY 1").fetchall())
        bad_attempts = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE attempts <> 1").fetchone()[0]
        per_job = conn.execute(
            "SELECT count(*) FILTER (WHERE s <> 1), count(*) FILTER (WHERE d <> 1)"
            " FROM (SELECT j.id, count(*) FILTER (WHERE e.type = 'started') AS s,"
            "              count(*) FILTER (WHERE e.type = 'succeeded') AS d"
            "       FROM procrastinate_jobs j LEFT JOIN procrastinate_events e"
            "       ON e.job_id = j.id GROUP BY j.id) x").fetchone()
        span = conn.execute(
            "SELECT extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')"
            "                        - min(at) FILTER (WHERE type = 'deferred')),"
            "       extract(epoch FROM max(at) FILTER (WHERE type = 'deferred')"
            "                        - min(at) FILTER (WHERE type = 'deferred'))"
            " FROM procrastinate_events").fetchone()
    problems = []
    if status != {"succeeded": jobs}:
        problems.append(f"job statuses {status}, expected {jobs} succeeded")
    if bad_attempts:
        problems.append(f"{bad_attempts} jobs with attempts <> 1")
    if per_job[0] or per_job[1]:
        problems.append(f"{per_job[0]} jobs without exactly one started event, "
                        f"{per_job[1]} without exactly one succeeded event")
    return ProcrastinateResult(jobs, float(span[0] or 0), float(span[1] or 0), tuple(problems))


def _worker_main(name: str, concurrency: int) -> None:
    app.run_worker(name=name, concurrency=concurrency, delete_jobs="never",
                   listen_notify=True, install_signal_handlers=True)


if __name__ == "__main__":
    _worker_main(sys.argv[1], int(sys.argv[2]))
