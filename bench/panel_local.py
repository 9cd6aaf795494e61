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

from harness import QL3 as _OWN  # noqa: E402
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


def _world(tmp: Path, tasks: int, runs: int, binary: str | None) -> tuple[Any, ...]:
    """A seeded data directory with `ql3 local serve` and `ql3 local web` of ``binary``
    (None: this venv's `ql3`): ``(ql3, serve, web, seconds to seed)``."""
    import panel_harness

    import harness

    if binary is not None:
        harness.QL3 = panel_harness.QL3 = binary  # read when each process is started
    data = tmp / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    t0 = time.monotonic()
    seed(data / "ql3.db", tasks, runs)
    seeded = time.monotonic() - t0
    serve = ql3.start_serve()
    web = start_web(ql3)
    harness.QL3 = panel_harness.QL3 = _OWN
    return ql3, serve, web, seeded


def run(tmp: Path, tasks: int, runs: int, repeats: int, timed: Callable[..., float],
        before_bin: str | None = None) -> dict[str, Any]:
    """The local figures, as ``bench/panel.py``'s ``pages`` answers them. ``before_bin``:
    another build's `ql3` (say main's), seeded alike in its own data directory and timed
    request by request alternated with this one; its cases are named ``… [before]``."""
    from qinglong.local.app.client import SocketBackend

    worlds = [("", _world(tmp / "after", tasks, runs, None))]
    if before_bin:
        worlds.append((" [before]", _world(tmp / "before", tasks, runs, before_bin)))
    run_ids = [_id(2, n) for n in range(7, runs, max(1, runs // 97))]
    clients: list[httpx.Client] = []
    try:
        cases: dict[str, tuple[Callable[[int], float], Callable[[int], float]]] = {}
        for tag, (ql3, _serve, web, _seeded) in worlds:
            sock = SocketBackend(str(ql3.data_dir / "ql3.sock"))

            def op(name: str, sock: Any = sock, **kwargs: Any) -> float:
                start = time.perf_counter()
                sock.call(name, **kwargs)
                return (time.perf_counter() - start) * 1000

            http = httpx.Client(base_url=web.base, timeout=60)
            clients.append(http)
            http.get(web.link)
            cases |= {
                "tasks, first page" + tag: (
                    lambda i, h=http: timed(h, "/", expect="京东签到-00001"),
                    lambda i, o=op: o("task_page", offset=0, limit=50, query="")),
                "tasks, search" + tag: (
                    lambda i, h=http: timed(h, "/", {"q": "淘宝"}, expect="京东签到-00100"),
                    lambda i, o=op: o("task_page", offset=0, limit=50, query="淘宝")),
                "run detail" + tag: (
                    lambda i, h=http: timed(h, f"/runs/{run_ids[i % len(run_ids)]}"),
                    lambda i, o=op: o("run_get", run_id=run_ids[i % len(run_ids)])),
            }
        out: dict[str, dict[str, list[float]]] = {}
        for name, (ui, sock_op) in cases.items():
            ui(0), sock_op(0)
            out[name] = {"panel": [], "api": []}
        for i in range(repeats):  # every case's request i before any case's i + 1
            for name, (ui, sock_op) in sorted(cases.items()):
                out[name]["panel"].append(ui(i))
                out[name]["api"].append(sock_op(i))
    finally:
        for http in clients:
            http.close()
        for _tag, (ql3, serve, web, _seeded) in worlds:
            web.stop()
            ql3.stop_serve(serve)
    return {"seed_s": round(worlds[0][1][3], 1), "pages": out}
