"""Scheduling cost with many tasks (issue 10 item 1, case C17), beside a baseline `serve` with
one task measured in the same run.

Data directories are made through the repository (``create_task``, as an import does); every
daily task fires at a time of day twelve hours away, so none is due during the run. Phases,
each on a real ``ql3 local serve``:

1. idle: 10,000 daily tasks vs 1 — serve CPU from /proc/<pid>/stat (utime + stime) over a
   quiet window, RSS (VmRSS) minus a bare interpreter's measured the same way;
2. warm start: spawn -> the socket answers ``ping``, next fire times already stored;
3. slots: the same two directories plus one ``*/1 * * * * *`` task (``true``) for 30 s:
   every slot in the window must have its run (30 of 30);
4. import: ``ql3 local import-qinglong`` of a generated Qinglong 2.x database with 2,000
   daily crons into a running serve: the import's time, then the time and serve CPU until
   every imported task's next fire time is computed; and the same first computation of
   2,000 pending tasks in this process (Scheduler ticks, CPU time).

Targets (issue 10 item 1): idle CPU <= 0.5 % of a core, RSS over bare <= 24 MiB, 30 of 30
slots, warm start <= 2 s. Usage: python bench/scheduler.py [WINDOW_SECONDS] (default 30).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from qinglong.local.app.client import SocketBackend
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Task
from qinglong.shared.ids import uuid7

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "legacy"))
from legacy_dbkit import build_install  # noqa: E402

from proc_stats import cpu_s, rss_kib  # noqa: E402

QL3 = str(Path(sys.executable).parent / "ql3")
MANY, IMPORTED = 10_000, 2_000


def daily_far_away() -> str:
    at = datetime.now(UTC) + timedelta(hours=12)
    return f"{at.minute} {at.hour} * * *"


def make_data(root: Path, name: str, daily: int) -> dict[str, str]:
    data = root / name
    env = dict(os.environ, QL3_DATA_DIR=str(data))
    env.pop("PYTHONPATH", None)
    subprocess.run([QL3, "local", "init", "--profile", "standalone"], env=env, check=True,
                   capture_output=True)
    db = open_database(str(data / "ql3.db"))
    repo = LocalRunRepository(db)
    schedule = daily_far_away()
    for n in range(daily):
        repo.create_task(Task(id=uuid7(), name=f"daily{n:05d}", argv=("true",),
                              schedule=schedule))
    db.close()
    return env


def ql3(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QL3, *args], env=env, check=True, capture_output=True, text=True)


def query(env: dict[str, str], sql: str) -> int:
    db = sqlite3.connect(f"file:{env['QL3_DATA_DIR']}/ql3.db?mode=ro", uri=True, timeout=10)
    try:
        return int(db.execute(sql).fetchone()[0])
    finally:
        db.close()


PENDING = ("SELECT count(*) FROM tasks WHERE next_fire_pending IS NOT NULL AND enabled = 1"
           " AND deleted_at_ms IS NULL")


class Serve:
    """A real ``ql3 local serve``; ``started_s`` is spawn -> socket answers ping."""

    def __init__(self, env: dict[str, str]) -> None:
        sock = env["QL3_DATA_DIR"] + "/ql3.sock"
        t0 = time.monotonic()
        self.proc = subprocess.Popen([QL3, "local", "serve"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not SocketBackend.probe(sock):
            if self.proc.poll() is not None or time.monotonic() - t0 > 60:
                raise RuntimeError("serve did not come up")
            time.sleep(0.01)
        self.started_s = time.monotonic() - t0

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


@dataclass
class Figures:
    idle_cpu_pct: float = 0.0
    rss_mib: float = 0.0
    warm_start_s: float = 0.0
    slots: tuple[int, int] = (0, 0)


def wait_computed(env: dict[str, str]) -> None:
    while query(env, PENDING):
        time.sleep(0.05)


def idle_and_warm(env: dict[str, str], window: float, figures: Figures) -> None:
    serve = Serve(env)  # the first start computes every next fire time
    wait_computed(env)
    serve.stop()
    serve = Serve(env)  # warm: next fire times stored
    figures.warm_start_s = serve.started_s
    time.sleep(3)
    before = cpu_s(serve.proc.pid)
    time.sleep(window)
    figures.idle_cpu_pct = 100 * (cpu_s(serve.proc.pid) - before) / window
    figures.rss_mib = rss_kib(serve.proc.pid) / 1024
    serve.stop()


def every_second(env: dict[str, str], window: int, figures: Figures) -> None:
    ql3(env, "local", "task", "add", "every-second", "--schedule", "*/1 * * * * *",
        "--concurrency", "allow", "--", "true")
    serve = Serve(env)
    time.sleep(2)
    first = (int(time.time()) + 1) * 1000  # the window: [first, first + window s)
    time.sleep(window + 3)
    serve.stop()
    fired = query(env, "SELECT count(DISTINCT r.scheduled_at_ms) FROM runs r JOIN tasks t"
                       " ON t.id = r.task_id WHERE t.name = 'every-second' AND"
                       f" r.scheduled_at_ms >= {first} AND r.scheduled_at_ms < "
                       f"{first + window * 1000}")
    figures.slots = (fired, window)


def bare_rss_mib() -> float:
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    time.sleep(1)
    try:
        return rss_kib(bare.pid) / 1024
    finally:
        bare.kill()
        bare.wait()


def import_figures(root: Path, env: dict[str, str]) -> tuple[float, float, float]:
    at = daily_far_away()
    crons = [{"id": n + 1, "name": f"imported {n}", "command": f"task job{n % 10}.js",
              "schedule": f"0 {at}"} for n in range(IMPORTED)]  # 6 fields, as 2.x writes
    install = build_install(root / "ql2", "2.21", crons=crons, envs=[],
                            scripts={f"job{n}.js": "" for n in range(10)})
    serve = Serve(env)
    try:
        wait_computed(env)
        cpu0, t0 = cpu_s(serve.proc.pid), time.monotonic()
        ql3(env, "local", "import-qinglong", str(install.db))
        imported = time.monotonic()
        wait_computed(env)
        done = time.monotonic()
        return imported - t0, done - imported, cpu_s(serve.proc.pid) - cpu0
    finally:
        serve.stop()


def compute_in_process(root: Path) -> tuple[float, float, int]:
    """CPU-s and wall s of the ticks that compute 2,000 pending next fire times (the work
    an import leaves), in this process, and the number of ticks."""
    from qinglong.local.scheduling.scheduler import Scheduler

    db = open_database(str(root / "inproc.db"))
    try:
        repo = LocalRunRepository(db)
        schedule = "0 " + daily_far_away()
        for n in range(IMPORTED):
            repo.create_task(Task(id=uuid7(), name=f"imp{n:05d}", argv=("true",),
                                  schedule=schedule, timezone="Asia/Shanghai"))
        sched = Scheduler(repo, lambda run_id: None)
        cpu0, t0, ticks = time.process_time(), time.monotonic(), 1
        while sched.tick(repo.clock()) <= repo.clock():
            ticks += 1
        return time.process_time() - cpu0, time.monotonic() - t0, ticks
    finally:
        db.close()


def main() -> None:
    window = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    with tempfile.TemporaryDirectory(prefix="ql3bench-sched-") as tmp:
        root = Path(tmp)
        t = time.monotonic()
        envs = {1: make_data(root, "one", 1), MANY: make_data(root, "many", MANY)}
        print(f"made data directories ({MANY:,} + 1 daily tasks) in {time.monotonic() - t:.1f} s")
        figures = {n: Figures() for n in envs}
        for n, env in envs.items():
            idle_and_warm(env, window, figures[n])
        bare = bare_rss_mib()
        for n, env in envs.items():
            every_second(env, window, figures[n])
        import_s, compute_s, compute_cpu = import_figures(root, envs[1])
        inproc_cpu, inproc_s, ticks = compute_in_process(root)
    base, many = figures[1], figures[MANY]

    def row(name: str, b: str, m: str, target: str, ok: bool) -> None:
        print(f"{name:<34} {b:>12} {m:>14}  {target:<14} {'PASS' if ok else 'FAIL'}")

    print(f"\n{'figure':<34} {'1 task':>12} {f'{MANY:,} tasks':>14}  {'target':<14} result")
    row(f"idle CPU over {window} s (% of a core)", f"{base.idle_cpu_pct:.3f}",
        f"{many.idle_cpu_pct:.3f}", "<= 0.5 %", many.idle_cpu_pct <= 0.5)
    row("RSS over bare python (MiB)", f"{base.rss_mib - bare:.1f}", f"{many.rss_mib - bare:.1f}",
        "<= 24 MiB", many.rss_mib - bare <= 24)
    row("warm start to ping (s)", f"{base.warm_start_s:.2f}", f"{many.warm_start_s:.2f}",
        "<= 2 s", many.warm_start_s <= 2)
    row(f"every-second slots fired of {window}", f"{base.slots[0]}/{base.slots[1]}",
        f"{many.slots[0]}/{many.slots[1]}", "all", many.slots[0] == many.slots[1])
    print(f"\nbare python RSS {bare:.1f} MiB; ratios 10k/1: idle CPU "
          f"{many.idle_cpu_pct / max(base.idle_cpu_pct, 1e-9):.1f}x, RSS "
          f"{many.rss_mib / base.rss_mib:.2f}x, warm start "
          f"{many.warm_start_s / base.warm_start_s:.2f}x")
    print(f"import of {IMPORTED:,} Qinglong 2.x crons into a running serve: import "
          f"{import_s:.2f} s, then first next-fire computation {compute_s:.2f} s "
          f"after it returned ({compute_cpu:.2f} CPU-s of serve, import included; serve "
          "computes batches while the import is still writing)")
    print(f"first next-fire computation of {IMPORTED:,} pending tasks in-process: "
          f"{inproc_cpu:.2f} CPU-s, {inproc_s:.2f} s wall, {ticks} ticks")


if __name__ == "__main__":
    main()
