"""The local panel (``ql3 local web``, docs/panel.md) at 10,000 tasks and 100,000 runs:
``bench/panel.py --local``. A fresh data directory (``ql3 local init``) whose ``ql3.db`` is
seeded by direct SQL before ``ql3 local serve`` opens it; pages timed through ``ql3 local
web`` beside the socket op the panel calls for the same answer (``task_page``,
``run_get``), alternated request by request."""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "integration" / "panel"))

from panel_harness import start_web  # noqa: E402

from harness import Ql3  # noqa: E402


def _id(kind: int, n: int) -> str:
    return f"01900000-0000-7000-8{kind:03x}-{n:012x}"


def seed(db_path: Path, tasks: int, runs: int) -> None:
    """Tasks ``京东签到-NNNNN`` (1 in 100 labelled ``淘宝`` running ``echo 淘宝签到``), a daily
    schedule, ``runs`` finished runs spread over them, one attempt each."""
    now = int(time.time() * 1000)
    per = max(1, runs // tasks)
    db = sqlite3.connect(db_path)
    with db:
        db.executemany(
            "INSERT INTO tasks (id, name, name_key, argv_json, schedule, timezone, labels_json,"
            " created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, '0 8 * * *', 'Asia/Shanghai',"
            " ?, ?, ?)",
            [(_id(1, i), f"京东签到-{i:05d}", f"京东签到-{i:05d}",
              '["sh", "-c", "echo 淘宝签到"]' if i % 100 == 0 else
              '["sh", "-c", "echo 签到成功"]', '["淘宝"]' if i % 100 == 0 else '["签到"]',
              now, now) for i in range(1, tasks + 1)])
        rows = [(g, ((g - 1) % tasks) + 1, (g - 1) // tasks + 1,
                 now - 30 * 86_400_000 + g * 20_000) for g in range(1, per * tasks + 1)]
        db.executemany(
            "INSERT INTO runs (id, task_id, trigger, status, not_before_ms, created_at_ms,"
            " updated_at_ms, finished_at_ms, number, exit_code) VALUES"
            " (?, ?, 'manual', 'succeeded', ?, ?, ?, ?, ?, 0)",
            [(_id(2, g), _id(1, t), at, at, at + 3000, at + 3000, n) for g, t, n, at in rows])
        db.executemany(
            "INSERT INTO attempts (id, run_id, number, executor, status, exit_code,"
            " started_at_ms, finished_at_ms, created_at_ms, updated_at_ms) VALUES"
            " (?, ?, 1, 'local_process', 'succeeded', 0, ?, ?, ?, ?)",
            [(_id(3, g), _id(2, g), at, at + 3000, at, at + 3000) for g, _, _, at in rows])
    db.execute("ANALYZE")
    db.close()


def run(tmp: Path, tasks: int, runs: int, repeats: int,
        timed: Callable[..., float]) -> dict[str, Any]:
    """The local figures, as ``bench/panel.py``'s ``pages`` answers them."""
    from qinglong.local.app.client import SocketBackend

    data = tmp / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    t0 = time.monotonic()
    seed(data / "ql3.db", tasks, runs)
    seeded = time.monotonic() - t0
    serve = ql3.start_serve()
    web = start_web(ql3)
    try:
        sock = SocketBackend(str(data / "ql3.sock"))

        def op(name: str, **kwargs: Any) -> float:
            start = time.perf_counter()
            sock.call(name, **kwargs)
            return (time.perf_counter() - start) * 1000

        run_ids = [_id(2, n) for n in range(7, runs, max(1, runs // 97))]
        with httpx.Client(base_url=web.base, timeout=60) as http:
            http.get(web.link)
            cases: dict[str, tuple[Callable[[int], float], Callable[[int], float]]] = {
                "tasks, first page": (
                    lambda i: timed(http, "/", expect="京东签到-00001"),
                    lambda i: op("task_page", offset=0, limit=50, query="")),
                "tasks, search": (
                    lambda i: timed(http, "/", {"q": "淘宝"}, expect="京东签到-00100"),
                    lambda i: op("task_page", offset=0, limit=50, query="淘宝")),
                "run detail": (
                    lambda i: timed(http, f"/runs/{run_ids[i % len(run_ids)]}"),
                    lambda i: op("run_get", run_id=run_ids[i % len(run_ids)])),
            }
            out: dict[str, dict[str, list[float]]] = {}
            for name, (ui, sock_op) in cases.items():
                ui(0), sock_op(0)
                out[name] = {"panel": [], "api": []}
                for i in range(repeats):
                    out[name]["panel"].append(ui(i))
                    out[name]["api"].append(sock_op(i))
    finally:
        web.stop()
        ql3.stop_serve(serve)
    return {"seed_s": round(seeded, 1), "pages": out}
