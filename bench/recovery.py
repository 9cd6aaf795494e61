"""Time to reconcile 256 startup candidates (issue 3 target: <= 1 s), beside a baseline.

Candidates: 256 runs left ``running`` by a crashed owner, half with a published receipt,
half whose process is gone (another pid and start ticks). Baseline measured in the same run:
256 FULL-synchronous SQLite commits of one small row each (the floor of one durable
transaction per candidate, which docs/protocols.md §3.4 step 1 requires).

Usage: python bench/recovery.py
"""

from __future__ import annotations

import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "recovery"))

from recovery_kit import Kit

from qinglong.shared.handles import ProcessHandle

CANDIDATES = 256


def baseline(root: str) -> float:
    conn = sqlite3.connect(os.path.join(root, "base.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    t0 = time.perf_counter()
    for n in range(CANDIDATES):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t VALUES (?)", (n,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as root:
        kit = Kit(Path(root))
        gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
        for n in range(CANDIDATES):
            run, attempt = kit.left_running(gone)
            if n % 2:
                kit.write_receipt(run, attempt, gone, code=0)
        t0 = time.perf_counter()
        result = kit.reconciler.reconcile()
        elapsed = time.perf_counter() - t0
        if not result.safe or result.candidates != CANDIDATES:
            raise SystemExit(f"recovery did not settle every candidate: {result}")
        kit.db.close()
        base = baseline(root)
    print(f"reconcile {CANDIDATES} candidates: {elapsed:.3f} s "
          f"({result.settled_from_receipt} from receipts, {result.lost} lost) (target <= 1 s)")
    print(f"baseline {CANDIDATES} FULL-sync commits: {base:.3f} s; ratio {elapsed / base:.2f}")


if __name__ == "__main__":
    main()
