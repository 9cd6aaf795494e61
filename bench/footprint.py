"""Memory footprint of the local profile, beside a baseline measured in the same run.

1. The wrapper's RSS per running attempt (issue 2 target: <= 10 MiB), next to a bare
   ``python -I -S`` that only sleeps.
2. ``ql3 local serve`` idle with 100 tasks on an edge data directory: RSS over a bare
   interpreter, against the 12 MiB goal (ADR-0069's gate, 16 MiB, is asserted by
   integration/test_edge_memory.py), and CPU over a quiet window (target <= 0.5 % of a core).

Usage: python bench/footprint.py [IDLE_SECONDS]   (default 60, as issue 3 asks)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from proc_stats import cpu_ticks, rss_kib
from qinglong.local.process.launch_request import LaunchConfig, LaunchRequest
from qinglong.local.process.launcher import LocalProcessLauncher
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Task, Trigger
from qinglong.shared.ids import uuid7

QL3 = str(Path(sys.executable).parent / "ql3")


def wrapper_rss(root: str) -> tuple[float, float]:
    db = open_database(os.path.join(root, "w.db"))
    repo = LocalRunRepository(db)
    task = repo.create_task(Task(id=uuid7(), name="fp", argv=("sleep", "3"), schedule="@once"))
    launcher = LocalProcessLauncher(
        LaunchConfig(log_root=os.path.join(root, "logs"),
                     receipt_root=os.path.join(root, "receipts"),
                     log_cap_bytes=16 * 1024 * 1024), repo)  # edge: output through the cap
    os.makedirs(os.path.join(root, "logs"), exist_ok=True)
    procs, samples = [], []
    for _ in range(3):
        run = repo.create_run(task.id, Trigger.MANUAL)
        assert run is not None
        attempt = repo.claim_attempt(run)
        log = os.path.join(root, "logs", attempt.id + ".log")
        attempt = repo.record_start_intent(attempt, log_path=log, deadline_at_ms=None)
        proc = launcher.start(LaunchRequest(run.id, attempt.id, ("sleep", "3"),
                                            {"PATH": os.environ["PATH"]}, root, log))
        repo.save_handle(attempt, proc.handle.encode())
        proc.open_gate()
        procs.append(proc)
    time.sleep(0.5)
    samples = [rss_kib(p.pid) for p in procs]
    bare = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import time; time.sleep(3)"])
    time.sleep(0.5)
    bare_kib = rss_kib(bare.pid)
    bare.kill()
    bare.wait()
    for p in procs:
        p.wait(None)
        p.close()
    db.close()
    return max(samples) / 1024, bare_kib / 1024


def serve_idle(root: str, seconds: float) -> tuple[float, float, float, int]:
    env = dict(os.environ, QL3_DATA_DIR=os.path.join(root, "data"))
    subprocess.run([QL3, "local", "init", "--profile", "edge"], env=env, check=True,
                   capture_output=True)
    db = open_database(os.path.join(root, "data", "ql3.db"))
    repo = LocalRunRepository(db)
    for n in range(100):  # hourly at minute 59, so nothing is due during the window
        repo.create_task(Task(id=uuid7(), name=f"task{n:03d}", argv=("true",),
                              schedule="59 * * * *" if n % 2 else "0 4 * * *"))
    db.close()
    report = os.path.join(root, "importtime.txt")
    with open(report, "w") as err:  # -X importtime: every module the serve process loads
        serve = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-c",
             "from qinglong.local.app.cli import entry; entry()", "local", "serve"],
            env=env, stdout=subprocess.DEVNULL, stderr=err)
    time.sleep(3)
    start_ticks = cpu_ticks(serve.pid)
    time.sleep(seconds)
    used = (cpu_ticks(serve.pid) - start_ticks) / os.sysconf("SC_CLK_TCK")
    serve_kib = rss_kib(serve.pid)
    serve.send_signal(signal.SIGTERM)
    serve.wait(30)
    with open(report) as fh:
        modules = {line.rsplit("|", 1)[1].strip() for line in fh
                   if line.startswith("import time:") and "|" in line}
    module_count = len(modules - {"imported package"})
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    time.sleep(0.5)
    bare_kib = rss_kib(bare.pid)
    bare.kill()
    bare.wait()
    return serve_kib / 1024, bare_kib / 1024, 100 * used / seconds, module_count


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    with tempfile.TemporaryDirectory() as root:
        wrapper, bare = wrapper_rss(root)
        print(f"wrapper RSS per running attempt: {wrapper:.1f} MiB "
              f"(bare python -I -S: {bare:.1f} MiB; ratio {wrapper / bare:.2f}; target <= 10 MiB)")
        serve, bare_full, cpu, modules = serve_idle(root, seconds)
        print(f"serve idle, 100 tasks: RSS {serve:.1f} MiB, bare python {bare_full:.1f} MiB, "
              f"over bare {serve - bare_full:.1f} MiB (goal <= 12 MiB; gate 16 MiB)")
        print(f"serve idle CPU over {seconds:.0f} s: {cpu:.2f} % of a core (target <= 0.5 %)")
        print(f"modules the serve process imported: {modules}")


if __name__ == "__main__":
    main()
