"""``ql3 cluster`` commands end to end through ``ql3``'s own entry point (``run_main``) against
a fake control (``httpx.MockTransport``) at COLUMNS=80: messages print whole, tables fit 80
columns and keep what the command is for, errors are one line with their exit code."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from qinglong.client import cli_common
from qinglong.client.http import ControlClient
from qinglong.local.app.cli import run_main
from qinglong.shared import display

Route = Callable[[httpx.Request], httpx.Response]
RUN_ID = "01a2333f-0000-7000-8000-00000000c0de"
LONG = "jd-daily-sign-in-backup"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Route]]:
    """Routes of a fake control (``"GET /v1/runs"`` → handler); every ``ql3 cluster``
    command talks to it. The viewer is at 80 columns in Asia/Shanghai."""
    routes: dict[str, Route] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        key = f"{request.method} {request.url.path}"
        if key not in routes:
            return httpx.Response(404, json={"error": {"code": "not_found",
                                                       "message": "not found"}})
        return routes[key](request)

    def make(urls: Any, token: str | None, **kwargs: Any) -> ControlClient:
        return ControlClient(urls, token, timeout_s=kwargs.get("timeout_s", 2),
                             transport=httpx.MockTransport(handler))

    monkeypatch.setattr(cli_common, "ControlClient", make)
    monkeypatch.setattr(cli_common, "WAIT_POLL_S", 0)
    monkeypatch.setenv("QL3_CONTROL_URL", "http://c1:8080")
    monkeypatch.setenv("QL3_TOKEN", "ql3_" + "t" * 43)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    yield routes
    monkeypatch.undo()
    time.tzset()
    display.DISPLAY.wide = display.DISPLAY.utc = False


def ql3(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run_main(["cluster", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def json_answer(body: Any, status: int = 200) -> Route:
    return lambda _request: httpx.Response(status, json=body)


def a_run(status: str, **over: Any) -> dict[str, Any]:
    run = {"id": RUN_ID, "task_name": LONG, "number": 4, "status": status,
           "exit_code": None, "attempt_count": 1, "trigger": "manual",
           "created_at": "2026-12-01T19:00:00Z", "started_at": "2026-12-01T19:00:01Z",
           "finished_at": None, "attempts": [], "events": []}
    run.update(over)
    return run


def test_run_wait_prints_its_status_lines_whole_at_80_columns(
        fake: dict[str, Route], capsys: pytest.CaptureFixture[str]) -> None:
    fake[f"POST /v1/tasks/{LONG}/run"] = json_answer(a_run("queued"), 201)
    fake[f"GET /v1/runs/{RUN_ID}"] = json_answer(
        a_run("failed", exit_code=3, finished_at="2026-12-01T19:00:09Z"))
    code, out, err = ql3(capsys, "run", LONG, "--wait")
    assert code == 1
    assert out == f"run {LONG}#4 ({RUN_ID}): failed (exit 3)\n"  # 82 columns, not cut
    assert err.splitlines() == [f"queued run {LONG}#4 ({RUN_ID}); waiting for it to end",
                                "ql3: the run ended failed"]


def test_inspect_at_80_columns_keeps_event_names_reasons_and_details_whole(
        fake: dict[str, Route], capsys: pytest.CaptureFixture[str]) -> None:
    run_id = RUN_ID

    def event(at: str, kind: str, before: str | None, after: str,
              **detail: object) -> dict[str, Any]:
        return {"at": f"2026-12-01T19:00:{at}Z", "kind": kind, "from_status": before,
                "to_status": after, "detail": detail}

    view = {"id": run_id, "task_name": "jd-daily-sign-in-backup", "number": 4,
            "status": "cancelled", "exit_code": None, "attempts": [
                {"number": 1, "status": "lost", "exit_code": None, "signal": None,
                 "started_at": "2026-12-01T19:00:01Z", "finished_at": "2026-12-01T19:00:09Z",
                 "worker_incarnation_id": run_id, "worker_name": "worker-east-1",
                 "reason": "worker_drained"},
                {"number": 2, "status": "cancelled", "exit_code": None, "signal": 15,
                 "started_at": "2026-12-01T19:00:10Z", "finished_at": "2026-12-01T19:00:15Z",
                 "worker_incarnation_id": run_id, "worker_name": "w2",
                 "reason": "cancel_requested"}],
            "events": [event("00", "run_created", None, "queued", trigger="manual"),
                       event("01", "run_dispatching", "queued", "dispatching"),
                       event("09", "attempt_completed", "running", "queued", attempt=1),
                       event("12", "cancel_requested", "running", "running", by="admin"),
                       event("15", "cancelled", "running", "cancelled")]}
    fake["GET /v1/runs/resolve"] = json_answer({"id": run_id})
    fake[f"GET /v1/runs/{run_id}"] = json_answer(view)
    code, out, _ = ql3(capsys, "inspect", "jd-daily-sign-in-backup#4")
    lines = out.splitlines()
    assert code == 0
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0] == f"run jd-daily-sign-in-backup#4 ({run_id}): cancelled"
    shown = "\n".join(lines)
    for word in ("worker_drained", "cancel_requested", "attempt_completed", "trigger=manual",
                 "attempt=1", "queued -> dispatching", "by=admin"):
        assert word in shown, lines
    assert lines[1] == "attempts (2026-12-02 +08:00):"  # the shared date and offset, once
    assert lines[3].split()[-1] == "worker_drained" and " 03:00:01 " in lines[3]
    assert lines[4].split()[-1] == "cancel_requested" and "sig 15" in lines[4]
    assert lines[5] == "events (2026-12-02 +08:00):"
    assert lines[9].split()[:2] == ["03:00:09", "attempt_completed"]
    wide = ql3(capsys, "inspect", "jd-daily-sign-in-backup#4", "--wide")[1].splitlines()
    assert wide[1] == "attempts:" and "2026-12-02 03:00:09 +08:00" in "\n".join(wide)


def test_runs_of_an_unknown_task_is_no_such_task_but_a_removed_task_s_runs_list(
        fake: dict[str, Route], capsys: pytest.CaptureFixture[str]) -> None:
    history = {"gone": [a_run("succeeded", task_name="gone", number=1, exit_code=0,
                              finished_at="2026-12-01T19:00:09Z")], "idle": []}

    def runs(request: httpx.Request) -> httpx.Response:  # control: an empty page, not 404
        items = history.get(request.url.params["task"], [])
        wanted = request.url.params.get("status")
        return httpx.Response(200, json={"items": [r for r in items if wanted in (
            None, r["status"])], "next_cursor": None})

    fake["GET /v1/runs"] = runs
    fake["GET /v1/tasks/idle"] = json_answer({"name": "idle"})  # live, never ran
    for name in ("nosuch", "gone", "idle"):
        fake.setdefault(f"GET /v1/tasks/{name}", json_answer(
            {"error": {"code": "task_not_found", "message": "no live task"}}, 404))
    assert ql3(capsys, "runs", "--task", "nosuch") == (
        2, "", "ql3: error: no such task 'nosuch'\n")
    assert ql3(capsys, "runs", "--task", "nosuch", "--status", "failed")[0] == 2
    code, out, _ = ql3(capsys, "runs", "--task", "gone")  # removed, its history stays
    assert code == 0 and out.splitlines()[1].split()[0] == "gone#1"
    code, out, _ = ql3(capsys, "runs", "--task", "gone", "--status", "failed")
    assert (code, out.split()) == (0, ["RUN", "ID", "STATUS", "EXIT", "STARTED", "DURATION"])
    assert ql3(capsys, "runs", "--task", "idle")[:2] == (
        0, "RUN  ID  STATUS  EXIT  STARTED  DURATION\n")


def test_an_attempt_without_a_log_says_how_it_ended_once(
        fake: dict[str, Route], capsys: pytest.CaptureFixture[str]) -> None:
    def attempt(number: int, status: str, reason: str | None) -> dict[str, Any]:
        return {"id": f"a{number}", "number": number, "status": status, "reason": reason}

    fake["GET /v1/runs/resolve"] = json_answer({"id": RUN_ID})
    fake[f"GET /v1/runs/{RUN_ID}"] = json_answer(a_run("lost", attempts=[
        attempt(1, "lost", "lease_expired"), attempt(2, "lost", "lost"),
        attempt(3, "failed", None)]))
    for number in (1, 2, 3):
        fake[f"GET /v1/attempts/a{number}/log"] = json_answer(
            {"error": {"code": "log_not_found", "message": "no log"}}, 404)
    code, out, err = ql3(capsys, "logs", f"{LONG}#4")
    assert (code, out) == (0, "")
    assert err.splitlines() == ["== attempt 1 ==", "attempt 1 left no log (lost: lease_expired)",
                                "== attempt 2 ==", "attempt 2 left no log (lost)",
                                "== attempt 3 ==", "attempt 3 left no log (failed)"]


def test_task_show_aligns_every_key(fake: dict[str, Route],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    view = {"name": LONG, "id": RUN_ID, "schedule": "0 3 * * *", "timezone": "Asia/Shanghai",
            "enabled": False, "concurrency_policy": "forbid", "timeout_s": 600,
            "max_attempts": 3, "cwd": None, "created_at": "2026-12-01T19:00:00Z",
            "updated_at": "2026-12-01T19:00:00Z", "bundle_digest": "ab" * 32,
            "entry_point": "run.sh", "argv": None, "shell": "echo hi",
            "env": {"MODE": {"value": "full", "secret": False},
                    "KEY": {"value": None, "secret": True}},
            "labels": {"zone": "a"}, "next_fire_at": None, "last_run": None, "history": []}
    fake[f"GET /v1/tasks/{LONG}"] = json_answer(view)
    fake["GET /v1/runs"] = json_answer({"items": [], "next_cursor": None})
    code, out, _ = ql3(capsys, "task", "show", LONG)
    lines = out.splitlines()
    assert code == 0 and all(len(line) <= 80 for line in lines), lines
    assert {line.index(": ") for line in lines} == {13}, lines  # one key column
    assert "  concurrency: forbid" in lines and " next_fire_at: disabled" in lines
    assert "   secret_env: KEY=********" in lines and "    timeout_s: 10m 00s" in lines


def _worker(labels: dict[str, str]) -> dict[str, Any]:
    return {"id": RUN_ID, "name": "w1", "pool": "default", "labels": labels,
            "concurrency": 2, "started_at": "2026-12-01T19:00:00Z",
            "last_seen_at": "2026-12-01T19:00:00Z", "stopped_at": None, "state": "live",
            "attempts_held": 0}


@pytest.mark.parametrize(("workers", "hint"), [
    ([_worker({"zone": "a"})],
     "no live worker has the labels zone=b: the run waits for one"),
    ([], "no worker is live: the run waits until one registers"),
    ([_worker({"zone": "b", "gpu": "yes"})], None),
], ids=["labels-unmatched", "no-worker", "matched"])
def test_a_run_no_live_worker_can_take_says_so_when_queued_and_inspected(
        fake: dict[str, Route], capsys: pytest.CaptureFixture[str],
        workers: list[dict[str, Any]], hint: str | None) -> None:
    fake["POST /v1/tasks/zb/run"] = json_answer(a_run("queued", task_name="zb"), 201)
    fake["GET /v1/tasks/zb"] = json_answer({"name": "zb", "labels": {"zone": "b"}})
    fake["GET /v1/workers"] = json_answer({"items": workers, "next_cursor": None})
    fake["GET /v1/runs/resolve"] = json_answer({"id": RUN_ID})
    fake[f"GET /v1/runs/{RUN_ID}"] = json_answer(a_run("queued", task_name="zb"))
    code, out, err = ql3(capsys, "run", "zb")
    assert (code, out) == (0, f"queued run zb#4 ({RUN_ID})\n")
    assert err == ("" if hint is None else f"warning: {hint}\n")
    code, out, _ = ql3(capsys, "inspect", "zb#4")
    assert code == 0
    waiting = [line for line in out.splitlines() if line.startswith("waiting: ")]
    assert waiting == ([] if hint is None else [f"waiting: {hint}"])


def test_run_sends_a_uuid_idempotency_key_and_retries_a_lost_answer_with_it(
        fake: dict[str, Route], capsys: pytest.CaptureFixture[str]) -> None:
    import uuid

    keys: list[str | None] = []

    def run_now(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers.get("Idempotency-Key"))
        if len(keys) == 1:  # the first answer is lost on the way back
            raise httpx.ReadTimeout("timed out", request=request)
        return httpx.Response(201, json={"id": RUN_ID, "number": 4})

    fake["POST /v1/tasks/京东签到/run"] = run_now
    fake["GET /v1/workers"] = json_answer({"items": []})
    code, out, _err = ql3(capsys, "run", "京东签到")
    assert code == 0 and out == f"queued run 京东签到#4 ({RUN_ID})\n"
    assert len(keys) == 2 and keys[0] == keys[1]
    assert uuid.UUID(str(keys[0])).version == 4


@pytest.mark.parametrize("args", [("vars", "set", "1BAD"), ("vars", "rm", "a-b"),
                                  ("vars", "enable", "京东"), ("vars", "pools", "X.Y")],
                         ids=["set", "rm", "enable", "pools"])
def test_a_bad_variable_name_is_said_as_a_variables_before_asking_control(
        fake: dict[str, Route], capsys: pytest.CaptureFixture[str],
        args: tuple[str, ...]) -> None:
    """The variable name rule of both profiles, said as the local profile says it (not as
    control's path field, a "task name"), exit 2, before stdin is read or control asked."""
    asked: list[str] = []
    fake["POST /v1/vars/1BAD"] = lambda request: asked.append(str(request.url)) or \
        httpx.Response(422, json={"error": {"code": "invalid_request", "message": "x"}})
    code, out, err = ql3(capsys, *args)
    assert code == 2 and out == "" and asked == []
    assert err == ("ql3: error: variable: a variable name is 1-128 of A-Z, a-z, 0-9 and _, "
                   "not starting with a digit\n"), err
