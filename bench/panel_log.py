"""How late a log line reaches a browser's EventSource through `ql3 local web`
(docs/panel.md "Run detail"), against the same line read by a client of the owner's socket
(`logs_wait`) in the same run: the ratio is the panel's hop (HTTP, SSE framing, threads).

    .venv/bin/python bench/panel_log.py [LINES]

A task prints LINES lines (default 40), one every 100 ms, each carrying the wall time it was
written; the reader notes when each line arrives. Prints median and p95 latency in ms for
both readers, and their ratio. Real processes only: `ql3 local serve` and `ql3 local web`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "integration"))
sys.path.insert(0, str(ROOT / "integration" / "panel"))

from panel_harness import start_web  # noqa: E402

from harness import Ql3  # noqa: E402
from qinglong.local.app.client import SocketBackend  # noqa: E402

SCRIPT = ("import sys, time\n"
          "for i in range({n}):\n"
          "    print(f'{{i}} {{time.time():.6f}}', flush=True)\n"
          "    time.sleep(0.1)\n")


def _latencies(text_lines: list[tuple[float, str]]) -> list[float]:
    out = []
    for arrived, line in text_lines:
        parts = line.split()
        if len(parts) == 2:
            out.append((arrived - float(parts[1])) * 1000)
    return out


def _via_socket(sock: SocketBackend, run_id: str) -> list[float]:
    offset, got, partial = 0, [], ""
    while True:
        chunk = sock.call("logs_wait", run_id=run_id, offset=offset, timeout_s=10)
        now = time.time()
        offset = int(chunk["offset"])
        lines = (partial + chunk["data"]).split("\n")
        partial = lines.pop()
        got += [(now, line) for line in lines]
        if chunk["done"] and not chunk["data"]:
            return _latencies(got)


def _via_panel(http: httpx.Client, run_path: str) -> list[float]:
    got, partial = [], ""
    with http.stream("GET", f"{run_path}/log/stream") as stream:
        for line in stream.iter_lines():
            if line.startswith("data: \""):
                now = time.time()
                lines = (partial + json.loads(line[6:])).split("\n")
                partial = lines.pop()
                got += [(now, text) for text in lines]
            if line.startswith("event: end"):
                return _latencies(got)
    return _latencies(got)


def _summary(name: str, ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    median, p95 = statistics.median(ms), ms[int(len(ms) * 0.95) - 1]
    print(f"{name:24} lines {len(ms):4}  median {median:7.2f} ms  p95 {p95:7.2f} ms")
    return median, p95


def main(lines: int) -> None:
    """Run both readers on one data directory; print their figures and ratios."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        ql3 = Ql3(data)
        ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
        ql3.run("local", "task", "add", "ticker", "--schedule", "0 8 * * *", "--",
                sys.executable, "-c", SCRIPT.format(n=lines))
        serve = ql3.start_serve()
        web = start_web(ql3)
        try:
            sock = SocketBackend(str(data / "ql3.sock"))
            run = sock.call("run_now", name="ticker")
            base = _summary("socket logs_wait", _via_socket(sock, run["id"]))
            with httpx.Client(base_url=web.base, timeout=30) as http:
                http.get(web.link)
                page = http.get("/").text
                csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
                run_path = http.post("/tasks/ticker/run", data={"csrf": csrf},
                                     headers={"Origin": web.base},
                                     follow_redirects=False).headers["location"]
                panel = _summary("panel SSE (ql3 local web)", _via_panel(http, run_path))
            print(f"ratio panel/socket: median {panel[0] / base[0]:.2f}, "
                  f"p95 {panel[1] / base[1]:.2f}")
        finally:
            web.stop()
            ql3.stop_serve(serve)


if __name__ == "__main__":
    os.environ.pop("PYTHONPATH", None)
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
