"""One owner per data directory, seen from the terminal (issue 12 items 5 and 6): a foreground
`ql3 local run` streams its task's output and serves the other commands; `cancel` stops the
run whoever owns the directory, or says why it could not."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import QL3, Ql3, alive_in_group, wait_for

pytestmark = pytest.mark.integration


class Foreground:
    """A foreground `ql3 local run NAME` (no serve), its stdout read line by line."""

    def __init__(self, ql3: Ql3, name: str) -> None:
        self.proc = subprocess.Popen([QL3, "local", "run", name], env=ql3.env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def finish(self, timeout: float = 30) -> tuple[int, str]:
        """Exit code and stderr once it ends."""
        self.proc.wait(timeout)  # stdout is the reader's alone (communicate would race it)
        self._reader.join(5)
        assert self.proc.stderr is not None
        return self.proc.returncode, self.proc.stderr.read()

    def kill(self) -> None:
        """Kill it if it still runs, and close its pipes."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Path]:
    """A file the task waits for; created at teardown so no task outlives its test."""
    path = tmp_path / "go"
    yield path
    path.touch()


def _gated(ql3: Ql3, name: str, gate: Path) -> None:
    ql3.run("local", "task", "add", name, "--schedule", "@once", "--", "sh", "-c",
            f"echo line-1; while [ ! -e {gate} ]; do sleep 0.05; done; echo line-2")


def _running(ql3: Ql3) -> dict[str, Any] | None:
    runs = ql3.json("local", "runs")
    return runs[0] if runs and runs[0]["status"] == "running" else None


def _pgid(run: dict[str, Any]) -> int:
    pgid = int(run["attempts"][0]["handle"].split(":")[3])
    assert pgid > 1
    return pgid


def test_a_foreground_run_prints_its_tasks_output_while_the_task_still_runs(
    ql3: Ql3, gate: Path
) -> None:
    _gated(ql3, "talk", gate)
    fg = Foreground(ql3, "talk")
    try:
        assert wait_for(lambda: "line-1" in fg.lines, 15), "no output before the task ended"
        assert not gate.exists() and fg.proc.poll() is None  # the task is still running
        gate.touch()
        code, _ = fg.finish()
    finally:
        fg.kill()
    assert code == 0
    assert fg.lines[:2] == ["line-1", "line-2"]
    assert "succeeded" in fg.lines[-1]


def test_other_commands_go_through_a_foreground_run_instead_of_failing_in_use(
    ql3: Ql3, gate: Path
) -> None:
    _gated(ql3, "talk", gate)
    ql3.run("local", "task", "add", "other", "--schedule", "@once", "--", "true")
    fg = Foreground(ql3, "talk")
    try:
        run = wait_for(lambda: _running(ql3), 15)
        assert run, "runs did not show the foreground run running"
        assert "talk" in ql3.run("local", "task", "list").stdout
        assert ql3.json("local", "inspect", run["id"])["status"] == "running"
        assert ql3.json("local", "recovery", "status")["runs"] == [run["id"]]
        follower = subprocess.Popen([QL3, "local", "logs", "-f", run["id"]], env=ql3.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        refused = ql3.run("local", "run", "other", check=False)
        serve = ql3.run("local", "serve", check=False, timeout=30)
        gate.touch()
        followed, _ = follower.communicate(timeout=20)
        code, _ = fg.finish()
    finally:
        fg.kill()
    assert code == 0
    assert followed.split() == ["line-1", "line-2"]
    assert refused.returncode == 1 and "foreground `ql3 local run`" in refused.stderr
    assert serve.returncode == 1 and "foreground `ql3 local run`" in serve.stderr
    assert ql3.json("local", "runs", "--task", "other") == []  # nothing was queued for it


def test_cancel_wait_through_a_foreground_run_ends_it_cancelled_and_exits_0(
    ql3: Ql3, gate: Path
) -> None:
    _gated(ql3, "talk", gate)
    fg = Foreground(ql3, "talk")
    try:
        run = wait_for(lambda: _running(ql3), 15)
        assert run
        cancelled = ql3.run("local", "cancel", run["id"], "--wait", check=False)
        code, _ = fg.finish()
    finally:
        fg.kill()
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancel requested" in cancelled.stderr
    assert "cancelled" in cancelled.stdout
    assert code == 1  # the foreground run reports a run that did not succeed
    assert ql3.json("local", "inspect", run["id"])["status"] == "cancelled"
    assert alive_in_group(_pgid(run)) == []


def test_cancel_through_serve_says_cancel_requested_and_wait_waits_for_the_end(
    ql3: Ql3,
) -> None:
    ql3.run("local", "task", "add", "a", "--schedule", "@once", "--concurrency", "allow",
            "--", "sleep", "300")
    serve = ql3.start_serve()
    try:
        first = ql3.json("local", "run", "a")
        second = ql3.json("local", "run", "a")
        assert wait_for(lambda: all(r["status"] == "running"
                                    for r in ql3.json("local", "runs")), 15)
        asked = ql3.run("local", "cancel", first["id"])
        waited = ql3.run("local", "cancel", second["id"], "--wait", check=False)
        ended_first = wait_for(
            lambda: (r := ql3.json("local", "inspect", first["id"]))["finished_at"] and r, 15)
        again = ql3.run("local", "cancel", first["id"], check=False)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert asked.returncode == 0 and asked.stdout.startswith("cancel requested")
    assert waited.returncode == 0 and "cancelled" in waited.stdout
    assert ql3.json("local", "inspect", second["id"])["status"] == "cancelled"
    assert ended_first and ended_first["status"] == "cancelled"
    assert again.returncode == 1 and "already finished" in again.stderr


def _kill_wrapper_group(pgid: int) -> None:
    """Test cleanup: KILL the group only while its leader is still the attempt's wrapper
    (a freed group id may already name another process group on a busy machine)."""
    try:
        with open(f"/proc/{pgid}/cmdline", "rb") as fh:
            leader = fh.read()
    except OSError:
        return
    if pgid > 1 and b"/proc/self/fd/" in leader and alive_in_group(pgid):
        os.killpg(pgid, signal.SIGKILL)


def _left_running_by_a_killed_serve(ql3: Ql3, *argv: str) -> dict[str, Any]:
    ql3.run("local", "task", "add", "left", "--schedule", "@once", "--", *argv)
    serve = ql3.start_serve()
    ql3.run("local", "run", "left")
    run = wait_for(lambda: _running(ql3), 15)
    serve.send_signal(signal.SIGKILL)
    serve.wait(10)
    assert run
    return dict(run)


def test_cancel_with_no_owner_stops_the_whole_group_itself_and_records_cancelled(
    ql3: Ql3,
) -> None:
    run = _left_running_by_a_killed_serve(ql3, "sh", "-c", "sleep 300 & sleep 301; wait")
    pgid = _pgid(run)
    try:
        result = ql3.run("local", "cancel", run["id"], check=False)
        alive_when_cancel_returned = alive_in_group(pgid)
    finally:
        _kill_wrapper_group(pgid)
    assert result.returncode == 0, result.stderr
    assert alive_when_cancel_returned == []
    assert "cancelled" in result.stdout
    assert ql3.json("local", "inspect", run["id"])["status"] == "cancelled"


def test_cancel_with_no_owner_kills_a_group_that_ignores_term_once_the_grace_is_over(
    ql3: Ql3,
) -> None:
    run = _left_running_by_a_killed_serve(ql3, "sh", "-c", "trap '' TERM; sleep 300 & wait")
    pgid = _pgid(run)
    started = time.monotonic()
    try:
        result = ql3.run("local", "cancel", run["id"], check=False)
        took = time.monotonic() - started
        alive_when_cancel_returned = alive_in_group(pgid)
    finally:
        _kill_wrapper_group(pgid)
    assert result.returncode == 0, result.stderr
    assert alive_when_cancel_returned == []
    assert took >= 4.5, "KILL came before the grace period (5 s) was over"
    assert "KILL after 5 s" in result.stderr
    assert ql3.json("local", "inspect", run["id"])["status"] == "cancelled"


def test_cancel_with_no_owner_exits_1_and_says_why_when_the_handle_cannot_be_trusted(
    ql3: Ql3,
) -> None:
    run = _left_running_by_a_killed_serve(ql3, "sleep", "300")
    pgid = _pgid(run)
    with sqlite3.connect(ql3.data_dir / "ql3.db") as conn:  # a field corruption
        conn.execute("UPDATE attempts SET handle = 'ql3lp1:garbage' WHERE run_id = ?",
                     (run["id"],))
    conn.close()
    try:
        result = ql3.run("local", "cancel", run["id"], check=False)
        still_running = alive_in_group(pgid)
    finally:
        _kill_wrapper_group(pgid)
    assert result.returncode == 1
    assert "not stopped" in result.stderr and "recovery status" in result.stderr
    assert still_running, "the test meant a run that nothing can stop safely"
    assert ql3.json("local", "inspect", run["id"])["status"] == "running"


def test_ctrl_c_in_a_foreground_run_cancels_the_run_and_exits_130(
    ql3: Ql3, gate: Path
) -> None:
    ql3.run("local", "task", "add", "long", "--schedule", "@once", "--", "sh", "-c",
            "echo line-1; sleep 300 & sleep 301; wait")
    fg = Foreground(ql3, "long")
    try:
        run = wait_for(lambda: _running(ql3), 15)
        assert run and wait_for(lambda: "line-1" in fg.lines, 10)
        fg.proc.send_signal(signal.SIGINT)
        code, err = fg.finish()
    finally:
        fg.kill()
    assert code == 130, err
    assert ql3.json("local", "inspect", run["id"])["status"] == "cancelled"
    assert alive_in_group(_pgid(run)) == []
