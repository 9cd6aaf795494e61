"""Launch-to-running latency of the local launcher against a baseline, in the same run.

ours:     from ``LocalProcessLauncher.start()`` to the handle durably saved
          (journal register commit + spawn + identity + ``save_handle`` commit)
baseline: ``subprocess.Popen`` returning for ``python -I -S -c pass`` plus two
          FULL-synchronous SQLite commits (the two fenced writes the protocol needs)

Prints both medians (ms) and the ratio ours/baseline (issue 2 target: <= 1.5).
Usage: python bench/launch.py [ROUNDS]
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from qinglong.local.process.launch_request import LaunchConfig, LaunchRequest
from qinglong.local.process.launcher import LocalProcessLauncher
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Task, Trigger
from qinglong.shared.ids import uuid7


def baseline_once(conn: sqlite3.Connection) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", "pass"])
    for _ in range(2):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (x) VALUES (?)", (time.time_ns(),))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    proc.wait()
    return elapsed


def ours_once(repo: LocalRunRepository, launcher: LocalProcessLauncher, task: Task,
              root: str) -> float:
    run = repo.create_run(task.id, Trigger.MANUAL)
    assert run is not None
    attempt = repo.claim_attempt(run)
    log_path = os.path.join(root, "logs", f"{attempt.id}.log")
    attempt = repo.record_start_intent(attempt, log_path=log_path, deadline_at_ms=None)
    request = LaunchRequest(run.id, attempt.id, ("true",), {"PATH": os.environ["PATH"]}, root,
                            log_path)
    t0 = time.perf_counter()
    proc = launcher.start(request)
    repo.save_handle(attempt, proc.handle.encode())
    elapsed = time.perf_counter() - t0
    proc.open_gate()
    proc.wait(None)
    proc.close()
    return elapsed


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    with tempfile.TemporaryDirectory() as root:
        base = sqlite3.connect(os.path.join(root, "base.db"), isolation_level=None)
        base.execute("PRAGMA journal_mode=WAL")
        base.execute("PRAGMA synchronous=FULL")
        base.execute("CREATE TABLE t (x INTEGER)")
        db = open_database(os.path.join(root, "ql3.db"))
        repo = LocalRunRepository(db)
        task = repo.create_task(Task(id=uuid7(), name="bench", argv=("true",), schedule="@once"))
        launcher = LocalProcessLauncher(
            LaunchConfig(log_root=os.path.join(root, "logs"),
                         receipt_root=os.path.join(root, "receipts")),
            repo,
        )
        os.makedirs(os.path.join(root, "logs"), mode=0o700)
        for shard in range(256):  # steady state: `ql3 local init` creates every shard
            launcher.store.prepare_shard(uuid7()[:-2] + f"{shard:02x}")
        ours, baseline = [], []
        for _ in range(3):  # warm-up
            baseline_once(base)
            ours_once(repo, launcher, task, root)
        for _ in range(rounds):  # interleaved, so drift hits both alike
            baseline.append(baseline_once(base))
            ours.append(ours_once(repo, launcher, task, root))
        db.close()
        base.close()
    b, o = statistics.median(baseline) * 1000, statistics.median(ours) * 1000
    print(f"rounds: {rounds}")
    print(f"baseline (Popen python -I -S -c pass + 2 FULL commits): median {b:.2f} ms")
    print(f"ours (start() to handle durably saved):                  median {o:.2f} ms")
    print(f"ratio ours/baseline: {o / b:.2f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
