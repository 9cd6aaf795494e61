"""The cluster panel (``/ui``, docs/panel.md) at 10,000 tasks and 100,000 runs, beside the
API's answers to the same questions in the same run (DESIGN.md §4.6, §4.7).

1. **Pages.** Round-trip ms (loopback HTTP, so server time plus a few hundred µs) of the
   Tasks page — first page, a label-filtered page (``q=platform=淘宝``, 1 task in 100), a
   search (``q=淘宝``, the same tasks by command) — and of a run's detail page, each
   alternated request by request with its API baseline: ``GET /v1/tasks`` (``limit=50``,
   the panel's page size; ``label=``, ``q=``) and ``GET /v1/runs/{id}``. Goal: p95 ≤ 100 ms.
2. **Live log.** A task prints ``line N <wall clock>`` every 100 ms on a real worker; a
   headless Chromium (Debian's chromium-headless-shell through playwright's
   ``executable_path``) shows its run page, and a MutationObserver notes when each line
   enters ``#log``; an API follower (``GET /v1/attempts/{id}/log?follow=1``) reads the same
   lines at the same time (the baseline). Write → DOM / write → API read, ms, one clock
   (the host's wall clock). Goal: p95 ≤ 1 s.
3. **Burst.** A task prints 40,000 lines at once; the page (open from the start) reports
   every main-thread task over 50 ms through a PerformanceObserver for ``longtask``. Goal:
   the longest under 200 ms.

The database is a fresh one migrated by ``ql3 control migrate``; tasks, runs (10 per task,
each with one attempt) are seeded by direct SQL (triggers and foreign-key checks skipped:
consistent by construction), then ``VACUUM ANALYZE``. One ``ql3 control serve`` replica,
one ``ql3 worker run``, moto's S3 server; everything dropped or stopped on exit. Figures are
printed, never asserted. Usage (run it nice'd on a shared host):

    nice -n 10 .venv/bin/python bench/panel.py [--tasks N] [--runs N] [--repeats N]
                                               [--lines N] [--burst N] [--profile FILE]
                                               [--only pages|log|burst] [--local]

``--before-live-log FILE [--rounds N]``: a second worker whose ``qinglong.worker.live_log``
is FILE's code (another build's sender), and a busy and a sparse ticker alternated on both
workers (write → DOM, write → API read, log-chunk requests per attempt).

``--local``: the same page figures for ``ql3 local web`` over a seeded data directory,
beside the owner's socket ops (``bench/panel_local.py``).

``--profile FILE`` records the replica with ``py-spy record`` (env ``PY_SPY``, PATH, or
beside this interpreter) during the page requests, as a flame graph SVG.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
for _dir in (ROOT / "bench", ROOT / "integration", ROOT / "integration" / "cluster",
             ROOT / "integration" / "s3"):
    sys.path.insert(0, str(_dir))

from cluster_kit import Cluster, ClusterDb  # noqa: E402
from s3_services import CREDS, moto_server, new_bucket  # noqa: E402

from qinglong.control.retention.objects import make_client  # noqa: E402

PROJECT = "00000000-0000-7000-8000-000000000001"  # control serve's one project
CHROMIUM = shutil.which("chromium-headless-shell") or "/usr/bin/chromium-headless-shell"
PAGE = 50  # qinglong.panel.app.PAGE_SIZE

# Before any page script: every long task, and when each log line reaches the DOM.
INIT_SCRIPT = """
window.__longtasks = [];
window.__lines = {};
window.__firstLine = null;
window.__messages = [];  // [arrival ms, characters] of each stream message
const NativeSource = window.EventSource;
window.EventSource = function (url, init) {
  const source = new NativeSource(url, init);
  source.addEventListener("message", (e) =>
    window.__messages.push([Math.round(performance.now()), e.data.length]));
  return source;
};
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries())
      window.__longtasks.push([Math.round(e.startTime), Math.round(e.duration)]);
  }).observe({type: "longtask", buffered: true});
} catch (e) { window.__longtasks = null; }
new MutationObserver((records) => {
  const now = Date.now() / 1000;
  for (const r of records) for (const node of r.addedNodes) {
    if (window.__firstLine === null && node.classList && node.classList.contains("line"))
      window.__firstLine = Math.round(performance.now());
    const text = node.textContent || "";
    for (const line of text.split("\\n")) {
      const p = line.trim().split(" ");
      if (p.length === 3 && p[0] === "line" && !(p[1] in window.__lines))
        window.__lines[p[1]] = now - parseFloat(p[2]);
    }
  }
}).observe(document, {childList: true, subtree: true});
"""


def _key(kind: int, n: str) -> str:
    return f"('00000000-0000-7000-8{kind:03x}-' || lpad(to_hex({n}), 12, '0'))::uuid"


def seed(db: ClusterDb, tasks: int, runs: int) -> None:
    """``tasks`` tasks ``京东签到-NNNNN`` (1 in 100 labelled ``platform=淘宝`` and running
    ``echo 淘宝签到``), ``runs`` finished runs spread evenly over them (numbers 1..k per
    task), one succeeded attempt each; then VACUUM ANALYZE."""
    per = max(1, runs // tasks)
    t = f"((g - 1) % {tasks}) + 1"  # the run's task
    with db.connect() as conn:
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(f"""
INSERT INTO tasks (id, project_id, name, name_key, log_retention_s, created_at, argv,
  timezone, env, max_attempts, retry_backoff_ms, retry_backoff_cap_ms, concurrency_policy,
  catchup_grace_s, labels, log_limit_bytes, enabled, schedule_version, run_counter, version,
  updated_at)
SELECT {_key(1, 'i')}, '{PROJECT}', '京东签到-' || lpad(i::text, 5, '0'),
  '京东签到-' || lpad(i::text, 5, '0'), 604800, now(),
  CASE WHEN i % 100 = 0 THEN '["sh", "-c", "echo 淘宝签到"]'::jsonb
       ELSE '["sh", "-c", "echo 签到成功"]'::jsonb END,
  'Asia/Shanghai', '{{}}', 1, 10000, 600000, 'forbid', 60,
  CASE WHEN i % 100 = 0 THEN '{{"platform": "淘宝", "zone": "a"}}'::jsonb
       ELSE '{{"zone": "a"}}'::jsonb END, 16777216, true, 1, {per}, 1, now()
FROM generate_series(1, {tasks}) AS i;
INSERT INTO runs (id, project_id, task_id, owner, status, number, created_at, started_at,
  finished_at, not_before, attempt_count, exit_code)
SELECT {_key(2, 'g')}, '{PROJECT}', {_key(1, t)}, 'runtime', 'succeeded',
  ((g - 1) / {tasks}) + 1, now() - interval '30 days' + g * interval '20 seconds',
  now() - interval '30 days' + g * interval '20 seconds',
  now() - interval '30 days' + g * interval '20 seconds' + interval '3 seconds',
  now() - interval '30 days' + g * interval '20 seconds', 1, 0
FROM generate_series(1, {per * tasks}) g;
INSERT INTO attempts (id, run_id, number, executor, status, created_at, started_at,
  finished_at, exit_code)
SELECT {_key(3, 'g')}, {_key(2, 'g')}, 1, 'local_process', 'succeeded',
  now() - interval '30 days' + g * interval '20 seconds',
  now() - interval '30 days' + g * interval '20 seconds',
  now() - interval '30 days' + g * interval '20 seconds' + interval '3 seconds', 0
FROM generate_series(1, {per * tasks}) g;
""".encode())
        conn.execute("VACUUM ANALYZE")


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _timed(client: httpx.Client, url: str, params: dict[str, Any] | None = None,
           expect: str | None = None) -> float:
    start = time.perf_counter()
    answer = client.get(url, params=params)
    took = (time.perf_counter() - start) * 1000
    if answer.status_code != 200 or (expect is not None and expect not in answer.text):
        raise AssertionError(f"GET {url} {params}: {answer.status_code} {answer.text[:300]}")
    return took


def pages(base: str, panel: httpx.Client, api: httpx.Client, run_ids: list[str],
          repeats: int) -> dict[str, dict[str, list[float]]]:
    """ms per request of each case, panel and API alternated; one warm-up of each first."""
    cases: dict[str, tuple[Callable[[int], float], Callable[[int], float]]] = {
        "tasks, first page": (
            lambda i: _timed(panel, f"{base}/ui/", expect="京东签到-00001"),
            lambda i: _timed(api, f"{base}/v1/tasks", {"limit": PAGE})),
        "tasks, label filter": (
            lambda i: _timed(panel, f"{base}/ui/", {"q": "platform=淘宝"},
                             expect="京东签到-00100"),
            lambda i: _timed(api, f"{base}/v1/tasks",
                             {"limit": PAGE, "label": "platform=淘宝"})),
        "tasks, search": (
            lambda i: _timed(panel, f"{base}/ui/", {"q": "淘宝"}, expect="京东签到-00100"),
            lambda i: _timed(api, f"{base}/v1/tasks", {"limit": PAGE, "q": "淘宝"})),
        "run detail": (
            lambda i: _timed(panel, f"{base}/ui/runs/{run_ids[i % len(run_ids)]}"),
            lambda i: _timed(api, f"{base}/v1/runs/{run_ids[i % len(run_ids)]}")),
    }
    out: dict[str, dict[str, list[float]]] = {}
    for name, (ui, v1) in cases.items():
        ui(0), v1(0)  # warm-up: templates, statement caches
        out[name] = {"panel": [], "api": []}
        for i in range(repeats):
            out[name]["panel"].append(ui(i))
            out[name]["api"].append(v1(i))
    return out


def _api_follower(url: str, token: str, attempt: str, seen: dict[int, float]) -> None:
    """Per ``line N T``: ms from the write (T, the task's wall clock) to this read."""
    with httpx.stream("GET", f"{url}/v1/attempts/{attempt}/log",
                      params={"follow": 1, "from": "head"},
                      headers={"Authorization": f"Bearer {token}"}, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                now = time.time()
                for text in json.loads(line[6:]).get("t", "").splitlines():
                    parts = text.split()
                    if len(parts) == 3 and parts[0] == "line":
                        seen.setdefault(int(parts[1]), (now - float(parts[2])) * 1000)
            if '"status"' in line:
                return


def _attempt_of(api: httpx.Client, run_id: str) -> str:
    for _ in range(600):
        view = api.get(f"/v1/runs/{run_id}").json()
        if view["attempts"]:
            return str(view["attempts"][0]["id"])
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} was never claimed")


def _run_page(browser: Any, state: Any, url: str) -> Any:
    context = browser.new_context(storage_state=state, locale="zh-CN",
                                  viewport={"width": 1280, "height": 800})
    context.add_init_script(INIT_SCRIPT)
    page = context.new_page()
    page.goto(url)
    return page


def _chunk_posts(base: str) -> float:
    """``POST /v1/worker/log-chunk`` requests the replica has answered so far."""
    from dispatch_ours import request_stats

    return sum(st["count"] for key, st in request_stats([base]).items()
               if key.startswith("POST /v1/worker/log-chunk"))


def live_log(base: str, api: httpx.Client, viewer: str, browser: Any, state: Any,
             lines: int, task: str = "bench-ticker", skip: int = 10) -> dict[str, Any]:
    """Write → DOM and write → API read of ``task`` printing ``lines`` lines (the first
    ``skip``, written before both readers are surely connected, left out), and the
    log-chunk requests its attempt made."""
    posts = _chunk_posts(base)
    run_id = api.post(f"/v1/tasks/{task}/run").json()["id"]
    page = _run_page(browser, state, f"{base}/ui/runs/{run_id}")
    seen: dict[int, float] = {}
    follower = threading.Thread(target=_api_follower, daemon=True,
                                args=(base, viewer, _attempt_of(api, run_id), seen))
    follower.start()
    page.locator("#log[data-done='true']").wait_for(timeout=(lines * 0.1 + 90) * 1000)
    follower.join(30)
    dom = {int(k): v * 1000 for k, v in page.evaluate("window.__lines").items()}
    long = page.evaluate("window.__longtasks")
    page.context.close()
    keep = range(skip, lines)
    return {"dom": [dom[n] for n in keep if n in dom], "api": [seen[n] for n in keep if n in seen],
            "longtasks": long, "dom_missing": sum(1 for n in keep if n not in dom),
            "api_missing": sum(1 for n in keep if n not in seen),
            "chunk_posts": _chunk_posts(base) - posts}


def before_after(base: str, api: httpx.Client, viewer: str, browser: Any, state: Any,
                 lines: int, rounds: int) -> dict[str, Any]:
    """``--before-live-log``: the ticker (a line every 100 ms) and the sparse ticker (a line
    every 1.5 s) on the worker of this build (zone a) and on the one running the other
    sender (zone b), alternated ``rounds`` times; write → DOM, write → API read and
    log-chunk requests per attempt of each."""
    out: dict[str, Any] = {}
    for _round in range(rounds):
        for build, zone in (("before", "b"), ("after", "a")):
            for kind, n, skip in (("busy", lines, 10), ("sparse", 12, 2)):
                r = live_log(base, api, viewer, browser, state, n,
                             f"bench-{kind}-{zone}", skip)
                slot = out.setdefault(f"{kind}_{build}", {"dom": [], "api": [],
                                                          "chunk_posts": []})
                slot["dom"] += r["dom"]
                slot["api"] += r["api"]
                slot["chunk_posts"].append(r["chunk_posts"])
    return out


def burst(base: str, api: httpx.Client, browser: Any, state: Any) -> dict[str, Any]:
    """The run page open while the task prints its burst: long tasks (ms), lines left in the
    DOM, seconds from the page's load to the end of the stream."""
    run_id = api.post("/v1/tasks/bench-burst/run").json()["id"]
    page = _run_page(browser, state, f"{base}/ui/runs/{run_id}")
    start = time.monotonic()
    page.locator("#log[data-done='true']").wait_for(timeout=300_000)
    took = time.monotonic() - start
    page.wait_for_timeout(500)  # the observer's last entries (a bench, not a test)
    long = page.evaluate("window.__longtasks")
    first = page.evaluate("window.__firstLine")
    messages = page.evaluate("window.__messages")
    html = page.context.request.get(f"{base}/ui/runs/{run_id}").text()
    in_dom = page.locator("#log .line").count()
    page.context.close()
    return {"longtasks": long, "first_line_ms": first, "lines_in_dom": in_dom,
            "seconds": took, "messages": len(messages),
            "largest_message_chars": max((m[1] for m in messages), default=0),
            "message_span_s": (messages[-1][0] - messages[0][0]) / 1000 if messages else 0,
            "html": html}


def replay_burst(browser: Any, html: str, lines: int, message_chars: int,
                 spacing_s: float) -> dict[str, Any]:
    """The burst page without the cluster: the run page's HTML as the panel served it, its
    static files from the installed panel, and the burst's lines as SSE messages of about
    ``message_chars`` characters ``spacing_s`` apart, from a bare in-process HTTP server.
    The browser's own cost of showing the burst, the same run's baseline."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import qinglong.panel

    static = Path(qinglong.panel.__file__).parent / "static"
    text = "".join(f"第 {i} 行 burst 日志\n" for i in range(1, lines + 1))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, kind: str, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path.endswith("/log/stream"):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                self.wfile.write(b"retry: 600000\n\n")
                for at in range(0, len(text), message_chars):
                    part = json.dumps(text[at:at + message_chars])
                    self.wfile.write(f"id: {at}\ndata: {part}\n\n".encode())
                    self.wfile.flush()
                    time.sleep(spacing_s)
                self.wfile.write(b'event: end\ndata: "succeeded"\n\n')
            elif "/static/" in self.path:
                path = static / self.path.split("/static/", 1)[1].split("?")[0]
                kind = {".css": "text/css", ".js": "text/javascript"}.get(path.suffix,
                                                                          "text/plain")
                self._send(kind, path.read_bytes() if path.is_file() else b"")
            else:
                self._send("text/html; charset=utf-8", html.encode())

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        context = browser.new_context(locale="zh-CN", viewport={"width": 1280, "height": 800})
        context.add_init_script(INIT_SCRIPT)
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/ui/runs/replay")
        page.locator("#log[data-done='true']").wait_for(timeout=300_000)
        page.wait_for_timeout(500)  # the observer's last entries (a bench, not a test)
        long = page.evaluate("window.__longtasks")
        first = page.evaluate("window.__firstLine")
        context.close()
    finally:
        server.shutdown()
        server.server_close()
    return {"longtasks": long, "first_line_ms": first}


def _start_profile(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    beside = Path(sys.executable).parent / "py-spy"
    spy = os.environ.get("PY_SPY") or shutil.which("py-spy") or (
        str(beside) if beside.exists() else None)
    if spy is None:
        print("py-spy not found (env PY_SPY or PATH): no profile")
        return None
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--output", str(out),
                             "--rate", "200", "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _line(name: str, ms: list[float], base: list[float] | None = None) -> str:
    text = (f"  {name:28}{statistics.median(ms):8.1f}{_pct(ms, 0.95):8.1f}"
            f"{max(ms):8.1f}")
    if base:
        text += f"   x{statistics.median(ms) / statistics.median(base):5.2f}" \
                f"   x{_pct(ms, 0.95) / _pct(base, 0.95):5.2f}"
    return text


def _after(long: list[list[int]] | None, first: int | None) -> list[list[int]] | None:
    """The long tasks that ended after the first log line entered the DOM."""
    if long is None:
        return None
    return [t for t in long if first is not None and t[0] + t[1] >= first]


def _before(long: list[list[int]] | None, first: int | None) -> list[list[int]] | None:
    after = _after(long, first)
    return None if long is None or after is None else [t for t in long if t not in after]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=40, help="requests per page case")
    parser.add_argument("--lines", type=int, default=60, help="live-log lines, 100 ms apart")
    parser.add_argument("--burst", type=int, default=40_000, help="lines of the burst")
    parser.add_argument("--local", action="store_true",
                        help="the local profile's panel instead (pages only)")
    parser.add_argument("--before-bin", default=None, metavar="QL3",
                        help="--local: also time another build's ql3 (say main's "
                             ".venv/bin/ql3), alternated request by request")
    parser.add_argument("--only", choices=("pages", "log", "burst"), action="append",
                        help="measure only these parts (default: all)")
    parser.add_argument("--before-live-log", type=Path, default=None, metavar="FILE",
                        help="also run a worker whose live-log sender is FILE (another "
                             "build's worker/live_log.py) and compare the log figures")
    parser.add_argument("--rounds", type=int, default=2,
                        help="before/after rounds with --before-live-log")
    parser.add_argument("--profile", type=Path, default=None, metavar="FILE",
                        help="py-spy flame graph (SVG) of the replica during the pages")
    args = parser.parse_args()
    if not Path(CHROMIUM).exists():
        print("chromium-headless-shell is not installed (apt-get install "
              "chromium-headless-shell fonts-wqy-microhei)")
        return 2
    if args.local:
        return local_main(args)
    from playwright.sync_api import sync_playwright

    result: dict[str, Any] = {"tasks": args.tasks, "runs": args.runs,
                              "loadavg": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="ql3bench-panel-") as tmp, \
            moto_server() as moto:
        db = ClusterDb.create()
        cluster = Cluster(Path(tmp), db, moto,
                          new_bucket(make_client(moto, timeout_s=5, **CREDS), versioned=True))
        try:
            t0 = time.monotonic()
            seed(db, args.tasks, args.runs)
            result["seed_s"] = round(time.monotonic() - t0, 1)
            admin, viewer = cluster.token("admin"), cluster.token("viewer")
            control = cluster.start_control("c1", lease_ms=30_000, heartbeat_ms=2_000)
            base = str(control.url)
            cluster.start_worker("w1", cluster.token("worker", pool="default",
                                                     labels="zone=a"),
                                 base, concurrency=2, labels="zone=a")
            if args.before_live_log:
                boot = ("import sys; sys.argv[0] = 'ql3'; "
                        "import qinglong.worker.live_log as m; "
                        f"f = {str(args.before_live_log)!r}; "
                        "exec(compile(open(f).read(), f, 'exec'), m.__dict__); "
                        "from qinglong.local.app.cli import entry; entry()")
                cluster.start_worker("w0", cluster.token("worker", pool="before",
                                                         labels="zone=b"),
                                     base, concurrency=2, labels="zone=b",
                                     command=[sys.executable, "-c", boot])
            api = cluster.api(base, admin)
            tickers = {f"bench-{kind}-{zone}": (zone, shell) for zone in "ab" for kind, shell in (
                ("busy", f"n=0; while [ $n -lt {args.lines} ]; do echo \"line $n "
                         "$(date +%s.%N)\"; n=$((n+1)); sleep 0.1; done"),
                ("sparse", "n=0; while [ $n -lt 12 ]; do echo \"line $n $(date +%s.%N)\"; "
                           "n=$((n+1)); sleep 1.5; done"))}
            for name, (zone, shell) in tickers.items() if args.before_live_log else ():
                answer = api.post("/v1/tasks", json={"name": name, "shell": shell,
                                                     "labels": {"zone": zone},
                                                     "max_attempts": 1})
                assert answer.status_code == 201, answer.text
            for name, shell in (
                    ("bench-ticker", f"n=0; while [ $n -lt {args.lines} ]; do echo \"line $n "
                                     "$(date +%s.%N)\"; n=$((n+1)); sleep 0.1; done"),
                    ("bench-burst", f"seq -f '第 %.0f 行 burst 日志' 1 {args.burst}")):
                answer = api.post("/v1/tasks", json={"name": name, "shell": shell,
                                                     "labels": {"zone": "a"},
                                                     "max_attempts": 1})
                assert answer.status_code == 201, answer.text
            panel = httpx.Client(timeout=30)
            signed = panel.post(f"{base}/ui/signin", data={"token": viewer},
                                headers={"Origin": base})
            assert signed.status_code in (200, 303), signed.text[:300]
            viewer_api = httpx.Client(headers={"Authorization": f"Bearer {viewer}"},
                                      timeout=30)
            run_ids = [f"00000000-0000-7000-8002-{n:012x}"
                       for n in range(7, args.runs, max(1, args.runs // 97))]
            parts = set(args.only or ("pages", "log", "burst"))
            if "pages" in parts:
                spy = (_start_profile(control.popen.pid, args.profile)
                       if args.profile else None)
                result["pages"] = pages(base, panel, viewer_api, run_ids, args.repeats)
                if spy is not None:
                    spy.send_signal(signal.SIGINT)
                    spy.wait(60)
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM)
                try:
                    context = browser.new_context()
                    context.add_cookies([{"name": c.name, "value": c.value or "",
                                          "url": base} for c in panel.cookies.jar])
                    state = context.storage_state()
                    context.close()
                    if args.before_live_log:
                        result["before_after"] = before_after(base, api, viewer, browser,
                                                              state, args.lines, args.rounds)
                    if parts & {"log", "burst"}:  # the ticker page is the burst's baseline
                        result["live_log"] = live_log(base, api, viewer, browser, state,
                                                      args.lines)
                    if "burst" in parts:
                        b = result["burst"] = burst(base, api, browser, state)
                        spacing = b["message_span_s"] / max(1, b["messages"] - 1)
                        result["replay"] = replay_burst(
                            browser, b.pop("html"), args.burst,
                            max(1, b["largest_message_chars"]), spacing)
                finally:
                    browser.close()
            panel.close()
            viewer_api.close()
            api.close()
        finally:
            cluster.close()
            db.drop()
    return report(args, result)


def local_main(args: argparse.Namespace) -> int:
    """``--local``: the pages of ``ql3 local web`` beside the owner's socket ops."""
    from panel_local import run as run_local

    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ql3bench-panel-local-") as tmp:
        result = run_local(Path(tmp), args.tasks, args.runs, args.repeats, _timed,
                           args.before_bin)
    print(f"local: {args.tasks} tasks, {args.runs} runs (seeded in {result['seed_s']} s); "
          f"load average at start {load:.1f}")
    _report_pages(args, result["pages"], ("ql3 local web", "socket op (baseline)"))
    print(json.dumps({k: {s: {"p50": statistics.median(v), "p95": _pct(v, 0.95)}
                          for s, v in fig.items()} for k, fig in result["pages"].items()},
                     sort_keys=True))
    return 0


def _report_pages(args: argparse.Namespace, figures: dict[str, Any],
                  names: tuple[str, str] = ("panel /ui", "API /v1 (baseline)")) -> None:
    print(f"pages: ms per request, {args.repeats} each, panel and API alternated")
    print(f"  {'':28}{'median':>8}{'p95':>8}{'max':>8}   panel/API median, p95")
    for name, fig in figures.items():
        print(f" {name}")
        print(_line(names[0], fig["panel"], fig["api"]))
        print(_line(names[1], fig["api"]))
    print("  goal: panel p95 <= 100 ms")


def _report_log(args: argparse.Namespace, log: dict[str, Any]) -> None:
    print(f"live log: ms from the task's write, {args.lines - 10} lines 100 ms apart")
    print(_line("browser DOM (panel SSE)", log["dom"], log["api"]))
    print(_line("API follower (baseline)", log["api"]))
    print(f"  missing: DOM {log['dom_missing']}, API {log['api_missing']}; "
          "goal: DOM p95 <= 1000 ms")


def _report_burst(args: argparse.Namespace, b: dict[str, Any], log: dict[str, Any],
                  replay: dict[str, Any]) -> None:
    print(f"burst of {args.burst} lines: {b['seconds']:.1f} s from page load to the end, "
          f"{b['lines_in_dom']} lines left in the DOM; {b['messages']} stream messages, "
          f"the largest {b['largest_message_chars']} characters, over "
          f"{b['message_span_s']:.1f} s")
    print(f"  {'long tasks (> 50 ms)':28}{'count':>8}{'longest':>8}{'total':>8}")
    for name, long in (("burst page, lines shown", _after(b["longtasks"], b["first_line_ms"])),
                       ("burst page, before lines", _before(b["longtasks"],
                                                            b["first_line_ms"])),
                       ("replayed, no cluster (base)", _after(replay["longtasks"],
                                                               replay["first_line_ms"])),
                       ("ticker page (baseline)", log["longtasks"])):
        if long is None:
            print("  longtask observer unsupported by this browser")
            break
        took = [d for _, d in long]
        print(f"  {name:28}{len(took):8}{max(took, default=0):8.0f}{sum(took):8.0f}")
    print("  goal: longest while lines are shown < 200 ms")


def report(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Print the figures and one JSON line."""
    print(f"{args.tasks} tasks, {args.runs} runs (seeded in {result['seed_s']} s); "
          f"load average at start {result['loadavg']:.1f}")
    if "pages" in result:
        _report_pages(args, result["pages"])
    if "live_log" in result:
        _report_log(args, result["live_log"])
    for key, fig in sorted(result.get("before_after", {}).items()):
        posts = fig["chunk_posts"]
        print(_line(f"{key}: DOM", fig["dom"]) + f"; log-chunk requests per attempt "
              f"{statistics.mean(posts):.1f} ({posts})")
        print(_line(f"{key}: API follower", fig["api"]))
    if "burst" in result:
        _report_burst(args, result["burst"], result["live_log"], result["replay"])
    print(json.dumps({k: v for k, v in result.items() if k != "pages"} | {
        "pages": {k: {s: {"p50": statistics.median(v), "p95": _pct(v, 0.95)}
                      for s, v in fig.items()} for k, fig in result.get("pages", {}).items()}},
        sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
