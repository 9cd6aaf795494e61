"""A real `ql3 local serve`, driven through its socket by the real command line."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from harness import QL3, Ql3, wait_for
from qinglong.shared.process.lock_holders import kill_lock_holders

pytestmark = pytest.mark.integration

RUN_KEYS = {"id", "task", "status", "exit_code", "signal", "created_at", "finished_at", "attempts"}
ATTEMPT_KEYS = {"id", "number", "status", "exit_code", "handle"}


def test_every_two_seconds_schedule_fires_once_per_even_second_slot(
    ql3: Ql3, tmp_path: Path
) -> None:
    """Runs of ``*/2 * * * * *`` are on its slots: each at an even second, none twice, their
    attempts never overlapping; waited for (three finished) by polling, not a fixed sleep."""
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "tick", "--schedule", "*/2 * * * * *", "--",
                "sh", "-c", "echo tick; sleep 0.5")

        def three_finished() -> list[dict[str, Any]] | None:
            runs: list[dict[str, Any]] = ql3.json("local", "runs", "--task", "tick")
            return runs if sum(1 for r in runs if r["finished_at"]) >= 3 else None

        runs = wait_for(three_finished, 30)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert runs, "three runs of an every-two-seconds task did not finish in 30 s"
    spans = sorted(
        (a["started_at"], a["finished_at"]) for r in runs for a in r["attempts"] if a["finished_at"]
    )
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start, "two attempts of the task overlapped"
    slots = sorted(datetime.fromisoformat(r["scheduled_at"].replace("Z", "+00:00"))
                   for r in runs)
    assert len(set(slots)) == len(slots)
    assert all(s.second % 2 == 0 and s.microsecond == 0 for s in slots), slots
    # two seconds apart, or a multiple when a slot came while the last attempt still ran
    # (the default policy forbid skips it) on a loaded machine
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(slots)]
    assert all(g >= 2 and g % 2 == 0 for g in gaps), slots


def test_run_runs_and_task_list_through_the_socket_return_the_documented_json(ql3: Ql3) -> None:
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "hello", "--schedule", "@once", "--",
                "sh", "-c", "echo hello; exit 4")
        tasks = ql3.json("local", "task", "list")
        run = ql3.json("local", "run", "hello", "--wait", check=False)
        runs = ql3.json("local", "runs")
    finally:
        assert ql3.stop_serve(serve) == 0
    assert [t["name"] for t in tasks] == ["hello"]
    assert set(run) >= RUN_KEYS
    assert run["status"] == "failed" and run["exit_code"] == 4
    assert set(run["attempts"][0]) >= ATTEMPT_KEYS
    assert run["attempts"][0]["handle"].startswith("ql3lp1:")
    assert isinstance(runs, list) and runs[0]["id"] == run["id"]
    assert set(runs[0]) >= RUN_KEYS


def test_logs_follow_streams_a_running_tasks_output(ql3: Ql3) -> None:
    """The follower starts once two lines are written, so its first read gets both: the
    rest is read through the same buffered reader (``communicate`` after ``readline`` reads
    the pipe's fd directly and loses what ``readline`` buffered, the line-2 loss once seen
    under load)."""
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "talker", "--schedule", "@once", "--", "sh", "-c",
                "for i in 1 2 3 4; do echo line-$i; sleep 1.5; done")
        run = ql3.json("local", "run", "talker")
        log = ql3.data_dir / "logs" / ql3.json("local", "inspect", run["id"])["task_id"] / (
            f"{run['id']}.1.log")
        assert wait_for(lambda: log.exists() and b"line-2" in log.read_bytes(), 20)
        follower = subprocess.Popen([QL3, "local", "logs", run["id"], "--follow"], env=ql3.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with follower:
            assert follower.stdout is not None and follower.stderr is not None
            first = follower.stdout.readline()
            status_at_first_line = ql3.json("local", "runs")[0]["status"]
            rest = follower.stdout.read()
            status_line = follower.stderr.read()
            assert follower.wait(20) == 0
    finally:
        assert ql3.stop_serve(serve) == 0
    assert first.strip() == "line-1"
    assert status_at_first_line == "running"
    assert rest.split() == ["line-2", "line-3", "line-4"]
    assert status_line.startswith("run talker#1 succeeded, exit code 0, took ")


def test_second_serve_on_a_served_directory_is_refused(ql3: Ql3) -> None:
    serve = ql3.start_serve()
    try:
        second = ql3.run("local", "serve", check=False, timeout=20)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert second.returncode == 1
    assert "already running" in second.stderr


def test_kill_9_of_serve_leaves_the_task_running_and_the_next_serve_settles_it_from_its_receipt(
    ql3: Ql3, tmp_path: Path
) -> None:
    """The run ends succeeded with exit code 0 from its receipt. The task waits for a gate
    file the test creates once serve is gone (a fixed sleep raced the test under load)."""
    marker, gate = tmp_path / "done", tmp_path / "gate"
    ql3.run("local", "task", "add", "slow", "--schedule", "@once", "--", "sh", "-c",
            f"while [ ! -e {gate} ]; do sleep 0.1; done; echo finished > {marker}")
    serve = ql3.start_serve()
    run = ql3.json("local", "run", "slow")
    assert wait_for(lambda: ql3.json("local", "runs")[0]["status"] == "running", 10)
    attempt = ql3.json("local", "runs")[0]["attempts"][0]
    pgid = int(attempt["handle"].split(":")[3])
    serve.send_signal(signal.SIGKILL)
    serve.wait(10)
    os.killpg(pgid, 0)  # the task's group survived its owner
    runs = ql3.json("local", "runs")
    assert runs[0]["status"] == "running" and "needs recovery" in runs[0]["recovery"]
    gate.touch()
    assert wait_for(marker.exists, 10)
    receipt = ql3.data_dir / "receipts" / attempt["id"][-2:] / f"{attempt['id']}.receipt"
    assert wait_for(receipt.exists, 10)
    serve = ql3.start_serve()  # receipt-first recovery, then admission
    try:
        final = ql3.json("local", "inspect", run["id"])
    finally:
        assert ql3.stop_serve(serve) == 0
    assert (final["status"], final["exit_code"]) == ("succeeded", 0)
    assert any((e["detail"] or {}).get("source") == "receipt" for e in final["events"])
    assert not receipt.exists()


def test_escaped_processes_without_a_receipt_make_the_next_serve_refuse(
    ql3: Ql3, tmp_path: Path
) -> None:
    """No receipt, the wrapper gone, but a process of the attempt still holds its lock:
    insufficient evidence, never "lost and done"."""
    ql3.run("local", "task", "add", "escape", "--schedule", "@once", "--", "sh", "-c",
            "setsid sleep 60 & sleep 60")
    serve = ql3.start_serve()
    ql3.run("local", "run", "escape")
    assert wait_for(lambda: ql3.json("local", "runs")[0]["status"] == "running", 10)
    [run] = ql3.json("local", "runs")
    wrapper = int(run["attempts"][0]["handle"].split(":")[2])
    serve.send_signal(signal.SIGKILL)
    serve.wait(10)
    os.kill(wrapper, signal.SIGKILL)  # the wrapper dies without publishing a receipt
    time.sleep(0.3)
    refused = ql3.run("local", "serve", check=False, timeout=20)
    assert refused.returncode == 1
    assert "startup recovery required" in refused.stderr
    assert run["id"] not in refused.stderr  # counts only, no run ids
    held = ql3.run("local", "recovery", "resolve", run["id"], "--as", "lost", check=False)
    assert held.returncode == 1 and "attempt lock" in held.stderr
    attempt_id = run["attempts"][0]["id"]
    lock = ql3.data_dir / "receipts" / attempt_id[-2:] / f"{attempt_id}.lock"
    assert len(kill_lock_holders(str(lock))) == 3  # sh, its sleep, and the escaped sleep
    assert wait_for(lambda: ql3.run("local", "recovery", "resolve", run["id"], "--as", "lost",
                                    check=False).returncode == 0, 10)
    assert ql3.json("local", "inspect", run["id"])["status"] == "lost"


def test_serve_detach_then_start_reattaches_and_enforces_the_stored_deadline(
    ql3: Ql3,
) -> None:
    ql3.run("local", "task", "add", "long", "--schedule", "@once", "--timeout", "4", "--",
            "sh", "-c", "sleep 300 & wait")
    serve = ql3.start_serve("--detach")
    ql3.run("local", "run", "long")
    assert wait_for(lambda: ql3.json("local", "runs")[0]["status"] == "running", 10)
    assert ql3.stop_serve(serve) == 0  # detach: the attempt keeps running
    [run] = ql3.json("local", "runs")
    pgid = int(run["attempts"][0]["handle"].split(":")[3])
    os.killpg(pgid, 0)
    assert run["status"] == "running"
    serve = ql3.start_serve()
    try:
        final = wait_for(lambda: (r := ql3.json("local", "inspect", run["id"]))["finished_at"]
                         and r, 15)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert final["status"] == "timed_out"
    assert "re-attached" in ql3.serve_log()


def test_recovery_resolve_refuses_while_the_process_still_runs_then_records_the_verdict(
    ql3: Ql3,
) -> None:
    ql3.run("local", "task", "add", "long", "--schedule", "@once", "--", "sleep", "300")
    serve = ql3.start_serve()
    ql3.run("local", "run", "long")
    assert wait_for(lambda: ql3.json("local", "runs")[0]["status"] == "running", 10)
    serve.send_signal(signal.SIGKILL)
    serve.wait(10)
    [run] = ql3.json("local", "runs")
    refused = ql3.run("local", "recovery", "resolve", run["id"], "--as", "lost", check=False)
    assert refused.returncode == 1 and "still running" in refused.stderr
    pgid = int(run["attempts"][0]["handle"].split(":")[3])
    os.killpg(pgid, signal.SIGKILL)
    time.sleep(0.5)
    [resolved] = ql3.json("local", "recovery", "resolve", run["id"], "--as", "lost")
    assert resolved["source"] == "operator" and resolved["status"] == "lost"
    assert ql3.json("local", "inspect", run["id"])["exit_code"] is None


def test_run_wait_exits_1_when_the_run_did_not_succeed(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "ok", "--schedule", "@once", "--", "true")
    ql3.run("local", "task", "add", "bad", "--schedule", "@once", "--", "false")
    assert ql3.run("local", "run", "ok", "--wait", check=False).returncode == 0
    failed = ql3.run("local", "run", "bad", "--wait", check=False)
    assert failed.returncode == 1 and "failed" in failed.stderr


def test_recovery_status_verbose_shows_each_attempts_evidence(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "v", "--schedule", "@once", "--", "sleep", "30")
    serve = ql3.start_serve()
    ql3.run("local", "run", "v")
    assert wait_for(lambda: ql3.json("local", "runs")[0]["status"] == "running", 10)
    serve.send_signal(signal.SIGKILL)
    serve.wait(10)
    [run] = ql3.json("local", "runs")
    try:
        view = ql3.json("local", "recovery", "status", "--verbose")
        [detail] = view["details"]
        [evidence] = detail["attempts"]
        assert (detail["run_id"], detail["task"]) == (run["id"], "v")
        assert (evidence["process"], evidence["receipt"], evidence["lock"]) == (
            "alive", "none", "held")
    finally:
        os.killpg(int(run["attempts"][0]["handle"].split(":")[3]), signal.SIGKILL)


def test_a_run_cancelled_while_no_owner_ran_stays_cancelled_after_restart(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "c", "--schedule", "@once", "--", "sleep", "60")
    serve = ql3.start_serve()
    ql3.run("local", "run", "c")
    assert wait_for(lambda: ql3.json("local", "runs")[0]["status"] == "running", 10)
    serve.send_signal(signal.SIGKILL)
    serve.wait(10)
    [run] = ql3.json("local", "runs")
    ql3.run("local", "cancel", run["id"])  # no owner: the command stops the group itself
    serve = ql3.start_serve()
    try:
        final = wait_for(lambda: (r := ql3.json("local", "inspect", run["id"]))["finished_at"]
                         and r, 15)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert final["status"] == "cancelled"


def test_a_data_directory_too_long_for_the_socket_is_refused_at_init(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    result = Ql3(deep).run("local", "init", "--data-dir", str(deep), check=False)
    assert result.returncode == 2 and "too long" in result.stderr
