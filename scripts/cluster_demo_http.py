"""A stand-in for ``ql3 cluster`` while this build has no cluster client (issue 13 item 2 lands
it): the few commands the demo shows, answered through the control API over HTTP (the first
replica that answers) and, for what the API of this build does not answer yet (workers, run
references), the demo's database. Delete this module once ``ql3 cluster`` is in main.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import httpx
from cluster_demo_stage import Stage


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ql3 cluster", add_help=False)
    sub = parser.add_subparsers(dest="cmd", required=True)
    task = sub.add_parser("task").add_subparsers(dest="verb", required=True)
    add = task.add_parser("add")
    add.add_argument("name")
    add.add_argument("--schedule")
    add.add_argument("--max-attempts", type=int, default=1)
    add.add_argument("--shell")
    task.add_parser("disable").add_argument("name")
    sub.add_parser("run").add_argument("name")
    sub.add_parser("runs").add_argument("--limit", type=int, default=20)
    sub.add_parser("workers")
    sub.add_parser("inspect").add_argument("ref")
    sub.add_parser("logs").add_argument("ref")
    return parser


def _send(stage: Stage, urls: str, method: str, path: str, body: Any = None) -> httpx.Response:
    """The first replica of ``urls`` that answers (a connection failure moves on)."""
    error: Exception | None = None
    for url in urls.split(","):
        try:
            return httpx.request(method, url + path, json=body, timeout=10, headers={
                "Authorization": f"Bearer {stage.admin_token}"})
        except httpx.TransportError as exc:
            error = exc
    raise RuntimeError(f"no replica answered: {error}")


def _run_id(stage: Stage, ref: str) -> str:
    name, _, number = ref.replace("@last", "#").partition("#")
    rows = stage.rows("SELECT r.id::text AS id FROM runs r JOIN tasks t ON t.id = r.task_id "
                      "WHERE t.name = %s AND (%s = '' OR r.number = %s::bigint) "
                      "ORDER BY r.number DESC LIMIT 1", name, number, number or "0")
    return str(rows[0]["id"])


def run(stage: Stage, urls: str, args: tuple[str, ...]) -> tuple[int, str]:
    """(exit code, output) of ``ql3 cluster ARGS`` for the demo's commands."""
    a = _parser().parse_args(args)
    if a.cmd == "task" and a.verb == "add":
        body = {"name": a.name, "shell": a.shell, "max_attempts": a.max_attempts,
                "schedule": None if a.schedule == "@once" else a.schedule}
        r = _send(stage, urls, "POST", "/v1/tasks", body)
        return r.status_code != 201, f"added task {a.name} ({r.json().get('id')})"
    if a.cmd == "task":
        r = _send(stage, urls, "POST", f"/v1/tasks/{a.name}/disable")
        return r.status_code != 200, f"task {a.name} disabled"
    if a.cmd == "run":
        r = _send(stage, urls, "POST", f"/v1/tasks/{a.name}/run")
        return r.status_code != 201, f"queued run {a.name} ({r.json().get('id')})"
    if a.cmd == "workers":
        rows = stage.rows("SELECT name, left(id::text, 8) AS id, stopped_at IS NULL AS up, "
                          "last_seen_at FROM worker_incarnations ORDER BY started_at DESC")
        return 0, "\n".join(f"{r['name']}  {r['id']}  last seen {r['last_seen_at']:%T}"
                            for r in rows)
    if a.cmd == "runs":
        r = _send(stage, urls, "GET", f"/v1/runs?limit={a.limit}")
        return r.status_code != 200, "\n".join(
            f"{i['task_name']}#{i['number']}  {i['status']:<10} exit {i['exit_code']}"
            for i in r.json()["items"])
    run_id = _run_id(stage, a.ref)
    r = _send(stage, urls, "GET", f"/v1/runs/{run_id}")
    view = r.json()
    if a.cmd == "inspect":
        lines = [f"run {a.ref}: {view['status']}"] + [
            json.dumps({k: x[k] for k in ("number", "status", "exit_code", "reason")})
            for x in view["attempts"]]
        return r.status_code != 200, "\n".join(lines)
    texts = []
    for attempt in view["attempts"]:
        log = _send(stage, urls, "GET", f"/v1/attempts/{attempt['id']}/log")
        texts.append(f"== attempt {attempt['number']} ==")
        texts.append(log.text.rstrip("\n") if log.status_code == 200 else
                     f"no log ({attempt['status']})")
    return 0, "\n".join(texts)
