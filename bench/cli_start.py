"""How long a `ql3` command takes from exec to exit, beside a bare interpreter in the same run.

Each command runs ROUNDS times (default 5) per binary; the median wall and user CPU seconds
are printed, with the bare ``python -c pass`` of this interpreter as the baseline. Several
``--ql3`` binaries (say, main's ``.venv/bin/ql3`` and this checkout's) take turns command by
command, so a busy machine slows them alike. The socket rows run against a ``serve`` of the
same binary; ``cluster task list`` asks a closed port (its import and connect cost only).

Usage: python bench/cli_start.py [ROUNDS] [--ql3 PATH ...]   (default: this venv's ql3)
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

QL3 = str(Path(sys.executable).parent / "ql3")

DIRECT = [
    ("ql3 --help", ["--help"]),
    ("ql3 local --help", ["local", "--help"]),
    ("ql3 local task list", ["local", "task", "list"]),
    ("ql3 local task add", ["local", "task", "add", "t{n}", "--schedule", "@once",
                            "--timezone", "UTC", "--", "/bin/true"]),
    ("ql3 local runs", ["local", "runs"]),
]
SOCKET = [
    ("ql3 local task list (serve)", ["local", "task", "list"]),
    ("ql3 local task add (serve)", ["local", "task", "add", "s{n}", "--schedule", "@once",
                                    "--timezone", "UTC", "--", "/bin/true"]),
    ("ql3 local runs (serve)", ["local", "runs"]),
]
CLUSTER = [
    ("ql3 cluster --help", ["cluster", "--help"]),
    ("ql3 cluster task list (no control)", ["cluster", "task", "list"]),
    ("ql3 control --help", ["control", "--help"]),
    ("ql3 worker --help", ["worker", "--help"]),
]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and user CPU seconds of one run of ``argv`` (any exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    wall = time.perf_counter() - start
    return wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before


class Binary:
    """One ``ql3`` with its own data directory."""

    def __init__(self, path: str, root: Path, index: int) -> None:
        self.path = path
        self.data = root / f"data{index}"
        self.env = dict(os.environ, QL3_DATA_DIR=str(self.data),
                        QL3_CONTROL_URL="http://127.0.0.1:9", QL3_TOKEN="bench")
        self.env.pop("PYTHONPATH", None)
        subprocess.run([path, "local", "init"], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        self.serve: subprocess.Popen[bytes] | None = None
        self.n = 0

    def run(self, args: list[str]) -> tuple[float, float]:
        self.n += 1
        return timed([self.path, *(a.format(n=self.n) for a in args)], self.env)

    def start_serve(self) -> None:
        self.serve = subprocess.Popen([self.path, "local", "serve"], env=self.env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not (self.data / "ql3.sock").exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.path}: serve did not come up")
            time.sleep(0.1)
        time.sleep(1.0)  # its startup recovery done

    def stop_serve(self) -> None:
        if self.serve is not None:
            self.serve.terminate()
            self.serve.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("rounds", nargs="?", type=int, default=5)
    parser.add_argument("--ql3", action="append", dest="binaries")
    opts = parser.parse_args()
    binaries_given = opts.binaries or [QL3]
    with tempfile.TemporaryDirectory() as tmp:
        binaries = [Binary(p, Path(tmp), i) for i, p in enumerate(binaries_given)]
        rows: list[tuple[str, list[tuple[float, float]]]] = []

        def measure(label: str, runners: list[Callable[[], tuple[float, float]]]) -> None:
            samples: list[list[tuple[float, float]]] = [[] for _ in runners]
            for _ in range(opts.rounds):
                for i, runner in enumerate(runners):
                    samples[i].append(runner())
            rows.append((label, [(statistics.median(w for w, _ in s),
                                  statistics.median(u for _, u in s)) for s in samples]))

        env = dict(os.environ)
        measure("bare python -c pass", [lambda: timed([sys.executable, "-c", "pass"], env)])
        for label, args in DIRECT:
            measure(label, [lambda b=b, a=args: b.run(a) for b in binaries])
        for b in binaries:
            b.start_serve()
        try:
            for label, args in SOCKET:
                measure(label, [lambda b=b, a=args: b.run(a) for b in binaries])
        finally:
            for b in binaries:
                b.stop_serve()
        for label, args in CLUSTER:
            measure(label, [lambda b=b, a=args: b.run(a) for b in binaries])
    print("median of", opts.rounds, "runs: wall / user seconds")
    for i, path in enumerate(binaries_given):
        print(f"  [{i}] {path}")
    for label, medians in rows:
        cells = "   ".join(f"[{i}] {w:5.3f} / {u:5.3f}" for i, (w, u) in enumerate(medians))
        print(f"{label:36} {cells}")


if __name__ == "__main__":
    main()
