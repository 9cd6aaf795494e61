"""``ql3 cluster logs [-f]`` through the real binary against a small control of this test's own
over real HTTP, implementing the raw log read of docs/protocols.md §4.7 (offset / wait / tail,
QL3-Log-* headers, long poll): follow with a gap, failover across replicas, the status line
and exit code; a running attempt without -f; a lost attempt's partial log. At 80 columns,
Chinese output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

QL3 = str(Path(sys.executable).parent / "ql3")
RUN_ID = "0190f1a2-0000-7000-8000-00000000abcd"
ATTEMPT_ID = "0190f1a2-0000-7000-8000-00000000a001"


class Log:
    """One attempt's raw log as control holds it: segments (offset, bytes) with gaps between
    them, an end, a state; ``append``/``skip``/``finish`` wake long polls."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.segments: list[tuple[int, bytes]] = []
        self.end = 0
        self.status = "running"
        self.stored: bytes | None = None  # the final object (None: no stored log)

    def append(self, data: bytes) -> None:
        with self.cond:
            self.segments.append((self.end, data))
            self.end += len(data)
            self.cond.notify_all()

    def skip(self, count: int) -> None:
        with self.cond:
            self.end += count
            self.cond.notify_all()

    def finish(self, status: str) -> None:
        with self.cond:
            self.status = status
            self.cond.notify_all()

    def read(self, offset: int) -> tuple[int, int, bytes]:
        """(first offset, gap, bytes) from ``offset`` (at most 64 KiB; the caller holds
        the lock)."""
        for start, data in self.segments:
            if start + len(data) > offset:
                first = max(start, offset)
                return first, first - offset, data[first - start:first - start + 65536]
        return max(offset, self.end), max(0, self.end - offset), b""


class Control:
    """The routes ``ql3 cluster logs`` uses. ``draining`` answers 503 to everything (and
    ends its long polls so): a replica going away."""

    def __init__(self, log: Log, run: dict[str, Any]) -> None:
        self.log = log
        self.run = run
        self.draining = False
        self.old = False  # a release before live logs: no raw path (query ignored)
        self.requests: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def drain(self) -> None:
        self.draining = True
        with self.log.cond:
            self.log.cond.notify_all()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        control = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _json(self, status: int, obj: Any) -> None:
                self._send(status, json.dumps(obj).encode(),
                           {"Content-Type": "application/json"})

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                control.requests.append(self.path)
                if self.headers.get("Authorization") != "Bearer viewer-token":
                    return self._json(401, {"error": {"code": "unauthorized"}})
                if control.draining:
                    return self._json(503, {"error": {"code": "draining"}})
                if url.path in ("/v1/runs/resolve", f"/v1/runs/{RUN_ID}"):
                    return self._json(200, control.run)
                if url.path != f"/v1/attempts/{ATTEMPT_ID}/log":
                    return self._json(404, {"error": {"code": "not_found"}})
                log = control.log
                if control.old and log.status == "running":
                    return self._json(404, {"error": {"code": "log_pending",
                                                      "message": "not finished"}})
                if not query or control.old:  # the stored object
                    if log.stored is None:
                        return self._json(404, {"error": {"code": "log_not_found",
                                                          "message": "no log"}})
                    return self._send(200, log.stored, {})
                with log.cond:
                    if "tail" in query:
                        offset = max(0, log.end - int(query["tail"]))
                    else:
                        offset = int(query.get("offset", "0"))
                    until = time.monotonic() + min(25, int(query.get("wait", "0")))
                    while (log.end <= offset and log.status == "running"
                           and not control.draining and time.monotonic() < until):
                        log.cond.wait(until - time.monotonic())
                    if control.draining:
                        return self._json(503, {"error": {"code": "draining"}})
                    first, gap, data = log.read(offset)
                    state = "running" if log.status == "running" else "complete"
                    headers = {"Content-Type": "application/octet-stream",
                               "QL3-Log-Offset": str(first), "QL3-Log-Gap": str(gap),
                               "QL3-Log-Next": str(first + len(data)),
                               "QL3-Log-State": state, "QL3-Attempt-Status": log.status}
                return self._send(200, data, headers)

        return Handler


def _run_view(status: str, attempt_status: str, exit_code: int | None) -> dict[str, Any]:
    ended = status not in ("queued", "running")
    return {"id": RUN_ID, "task_name": "备份", "number": 7, "status": status,
            "exit_code": exit_code, "created_at": "2026-01-01T00:00:00Z",
            "started_at": "2026-01-01T00:00:00Z",
            "finished_at": "2026-01-01T00:01:05Z" if ended else None,
            "attempts": [{"id": ATTEMPT_ID, "number": 1, "status": attempt_status,
                          "exit_code": exit_code, "reason": None}]}


@pytest.fixture
def replicas() -> Iterator[tuple[Log, list[Control]]]:
    log = Log()
    run = _run_view("running", "running", None)
    made = [Control(log, run), Control(log, run)]
    yield log, made
    for control in made:
        control.close()


def _ql3(urls: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "QL3_CONTROL_URL": urls, "QL3_TOKEN": "viewer-token", "COLUMNS": "80",
           "TZ": "Asia/Shanghai"}
    env.pop("PYTHONPATH", None)
    return subprocess.Popen([QL3, "cluster", "logs", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _wait(predicate: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(what)


def _long_polls(control: Control) -> int:
    return sum("wait=" in r for r in control.requests)


def test_follow_prints_as_it_comes_marks_gaps_fails_over_and_ends_with_the_status(replicas):
    log, (first, second) = replicas
    log.append("第一行：开始\n".encode())
    proc = _ql3(f"{first.url},{second.url}", "备份#7", "-f")
    try:
        _wait(lambda: _long_polls(first) >= 1, "the follower long-polls the first replica")
        log.append(b"progress 50%\rprogress 100%\n\xff raw byte kept\n")
        _wait(lambda: _long_polls(first) >= 2, "woken, then polling again")
        log.skip(4096)  # a flood the worker did not stream live
        log.append("第二行：洪水之后\n".encode())
        _wait(lambda: _long_polls(first) >= 3, "polling after the gap")
        first.drain()  # that replica goes away mid-poll: the read moves to the next one
        _wait(lambda: _long_polls(second) >= 1, "the follower moved to the second replica")
        log.append("最后一行\n".encode())
        _wait(lambda: _long_polls(second) >= 2, "polling the second replica")
        first.run.update(_run_view("succeeded", "succeeded", 0))
        log.finish("succeeded")
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out == ("第一行：开始\n".encode() + b"progress 50%\rprogress 100%\n\xff raw byte kept\n"
                   + "[… 4096 bytes not streamed live …]\n第二行：洪水之后\n最后一行\n".encode())
    lines = err.decode().splitlines()
    assert lines[-1] == f"run 备份#7 ({RUN_ID}): succeeded (exit 0) in 1m 05s"
    assert all(len(line) <= 80 for line in lines[:-1])
    assert proc.returncode == 0


def test_follow_of_a_failed_run_exits_1_after_its_status_line(replicas):
    log, (first, _second) = replicas
    log.append("出错了\n".encode())
    proc = _ql3(first.url, "备份#7", "-f", "--tail", "5")
    try:
        _wait(lambda: _long_polls(first) >= 1, "following")
        first.run.update(_run_view("failed", "failed", 3))
        log.finish("failed")
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out == "出错了\n".encode()
    assert err.decode().splitlines()[-2:] == [
        f"run 备份#7 ({RUN_ID}): failed (exit 3) in 1m 05s", "ql3: the run ended failed"]
    assert proc.returncode == 1


def test_without_follow_a_running_attempt_shows_what_is_there(replicas):
    log, (first, _second) = replicas
    log.append("运行中的输出\n".encode() * 3)
    proc = _ql3(first.url, "备份#7")
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert out == "运行中的输出\n".encode() * 3
    text = err.decode()
    assert "uploaded when it ends" not in text
    assert "attempt 1 is running: shown so far" in text
    assert "(ql3 cluster logs 备份#7 -f follows it)" in text


def test_a_lost_attempts_partial_log_is_shown_and_said_to_be_incomplete(replicas):
    log, (first, _second) = replicas
    log.append("丢失前的输出\n".encode())
    log.finish("lost")
    first.run.update(_run_view("lost", "lost", None))
    proc = _ql3(first.url, "备份#7")
    out, err = proc.communicate(timeout=30)
    assert out == "丢失前的输出\n".encode()
    assert "left no log" not in err.decode()
    assert "attempt 1 ended lost: its log above may be incomplete" in err.decode()


def test_follow_of_a_finished_run_prints_the_stored_log_with_its_marker(replicas):
    log, (first, _second) = replicas
    log.stored = "头部\n[ql3: 900 bytes left out]\n尾部\n".encode()
    log.finish("succeeded")
    first.run.update(_run_view("succeeded", "succeeded", 0))
    proc = _ql3(first.url, "备份#7", "-f")
    out, err = proc.communicate(timeout=30)
    assert out == log.stored
    assert err.decode().splitlines()[-1].endswith("succeeded (exit 0) in 1m 05s")
    assert proc.returncode == 0


def test_follow_against_a_control_without_live_logs_shows_the_log_when_it_ends(replicas):
    log, (first, _second) = replicas
    first.old = True
    proc = _ql3(first.url, "备份#7", "-f")
    try:
        _wait(lambda: sum("/log" in r for r in first.requests) >= 1, "asked for the log")
        log.stored = "旧版本的日志\n".encode()
        first.run.update(_run_view("succeeded", "succeeded", 0))
        log.finish("succeeded")
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert out == "旧版本的日志\n".encode()
    lines = err.decode().splitlines()
    assert lines[0] == ("control does not stream logs (older release): attempt 1 is shown "
                        "when it ends")
    assert all(len(line) <= 80 for line in lines)
    assert lines[-1].endswith("succeeded (exit 0) in 1m 05s")
    assert proc.returncode == 0
