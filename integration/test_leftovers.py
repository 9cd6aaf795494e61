"""Case C18 (issue 10 item 5): processes left behind after a normal exit, through real `ql3`.

`sh -c 'setsid sleep 300 & exit 0'`: the leader exits 0 while a process that escaped its
group still holds the attempt lock. Whether the run was started by hand (foreground or under
`serve`), on schedule, or settled from its receipt after `serve` was SIGKILLed, the leftover
is found through the lock, stopped (TERM, grace, KILL) and recorded: `inspect`, `runs` and
their `--json` show it; a lock whose holders cannot be found is shown as unresolved.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Ql3, wait_for

pytestmark = pytest.mark.integration

# The daemon writes its pid once it has left the group; the leader exits 0 only after that.
ESCAPE = ("setsid sh -c 'echo $$ > {pid}.tmp; mv {pid}.tmp {pid}; exec sleep 300' & "
          "while [ ! -s {pid} ]; do sleep 0.01; done; {then}exit 0")

# Holds the attempt lock with no process having it open (see the script's docstring).
INFLIGHT = Path(__file__).resolve().parents[1] / "tests" / "scripts" / "hold_lock_in_flight.py"


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, never reaped by this machine's pid 1, is gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _gone(pid: int, timeout: float = 15) -> bool:
    return bool(wait_for(lambda: not _alive(pid), timeout))


@pytest.fixture
def strays() -> Iterator[list[Path]]:
    """Pidfiles of processes a test may leave behind: every live one is KILLed after it."""
    files: list[Path] = []
    yield files
    for pidfile in files:
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            pid = int(pidfile.read_text())
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
                _gone(pid)


def _add(ql3: Ql3, name: str, schedule: str, command: str) -> None:
    ql3.run("local", "task", "add", name, "--schedule", schedule, "--", "sh", "-c", command)


def _assert_stopped_and_shown(ql3: Ql3, run: dict[str, Any], daemon: int) -> None:
    """The run kept its receipt's verdict, its daemon is gone, and every view says so."""
    assert (run["status"], run["exit_code"]) == ("succeeded", 0)
    assert _gone(daemon), "the escaped daemon outlived its run"
    shown = ql3.json("local", "inspect", run["id"])
    assert shown["leftovers"] == {"found": 1, "killed": 0, "unresolved": False,
                                  "note": "leftovers: 1 stopped (0 needed KILL)"}
    kinds = [e["kind"] for e in shown["events"]]
    assert kinds.count("leftovers_stopped") == 1
    assert kinds.index("leftovers_stopped") < kinds.index("run_succeeded")
    [listed] = [r for r in ql3.json("local", "runs") if r["id"] == run["id"]]
    assert listed["leftovers"] == shown["leftovers"]
    text = ql3.run("local", "inspect", run["id"]).stdout
    assert "leftovers: 1 stopped (0 needed KILL)" in text and "leftovers_stopped" in text
    assert "leftovers: 1 stopped" in ql3.run("local", "runs").stdout


def test_c18_a_foreground_manual_run_stops_the_escaped_daemon_and_says_so(
    ql3: Ql3, tmp_path: Path, strays: list[Path]
) -> None:
    pidfile = tmp_path / "daemon.pid"
    strays.append(pidfile)
    _add(ql3, "c18", "@once", ESCAPE.format(pid=pidfile, then=""))
    done = ql3.run("local", "run", "c18")  # no serve: supervised in the foreground
    assert "succeeded (exit 0) — leftovers: 1 stopped (0 needed KILL)" in done.stdout
    [run] = ql3.json("local", "runs")
    _assert_stopped_and_shown(ql3, run, int(pidfile.read_text()))


def test_c18_scheduled_and_manual_runs_under_serve_stop_the_escaped_daemon(
    ql3: Ql3, tmp_path: Path, strays: list[Path]
) -> None:
    boot_pid, manual_pid = tmp_path / "boot.pid", tmp_path / "manual.pid"
    strays.extend([boot_pid, manual_pid])
    _add(ql3, "c18-boot", "@boot", ESCAPE.format(pid=boot_pid, then=""))
    _add(ql3, "c18-manual", "@once", ESCAPE.format(pid=manual_pid, then=""))
    serve = ql3.start_serve()
    try:
        scheduled = wait_for(
            lambda: (r := ql3.json("local", "runs", "--task", "c18-boot"))
            and r[0]["finished_at"] and r[0], 30)
        manual = ql3.json("local", "run", "c18-manual", "--wait")
        assert scheduled and scheduled["trigger"] == "boot"  # started by the scheduler
        _assert_stopped_and_shown(ql3, scheduled, int(boot_pid.read_text()))
        _assert_stopped_and_shown(ql3, manual, int(manual_pid.read_text()))
    finally:
        assert ql3.stop_serve(serve) == 0
    assert "left behind: stopped" in ql3.serve_log()


def test_c18_after_a_crash_the_receipt_settles_the_run_then_the_daemon_is_stopped(
    ql3: Ql3, tmp_path: Path, strays: list[Path]
) -> None:
    pidfile, go = tmp_path / "daemon.pid", tmp_path / "go"
    strays.append(pidfile)
    _add(ql3, "c18-crash", "@once",
         ESCAPE.format(pid=pidfile, then=f"while [ ! -e {go} ]; do sleep 0.05; done; "))
    serve = ql3.start_serve()
    run = ql3.json("local", "run", "c18-crash")
    assert wait_for(pidfile.exists, 15)
    serve.send_signal(signal.SIGKILL)  # the owner dies while the task runs
    serve.wait(10)
    go.touch()  # the task exits 0 and its wrapper publishes the receipt, ownerless
    attempt = ql3.json("local", "inspect", run["id"])["attempts"][0]
    receipt = ql3.data_dir / "receipts" / attempt["id"][-2:] / f"{attempt['id']}.receipt"
    wrapper = int(attempt["handle"].split(":")[2])
    assert wait_for(lambda: receipt.exists() and not _alive(wrapper), 15)
    daemon = int(pidfile.read_text())
    assert _alive(daemon)  # the escaped daemon still holds the attempt lock
    serve = ql3.start_serve()  # receipt-first recovery: settles, then stops the leftover
    try:
        final = ql3.json("local", "inspect", run["id"])
        _assert_stopped_and_shown(ql3, final, daemon)
        assert any((e["detail"] or {}).get("source") == "receipt" for e in final["events"])
    finally:
        assert ql3.stop_serve(serve) == 0


def test_a_lock_held_by_processes_that_cannot_be_found_shows_as_unresolved(
    ql3: Ql3, tmp_path: Path, strays: list[Path]
) -> None:
    pidfile, script = tmp_path / "holder.pid", INFLIGHT
    strays.append(pidfile)
    ql3.run("local", "task", "add", "hidden", "--schedule", "@once", "--",
            sys.executable, str(script), str(pidfile))
    started = time.monotonic()
    done = ql3.run("local", "run", "hidden")
    assert time.monotonic() - started < 55
    assert "leftovers: UNRESOLVED" in done.stdout
    [run] = ql3.json("local", "runs")
    assert (run["status"], run["exit_code"]) == ("succeeded", 0)  # the receipt decides
    assert run["leftovers"]["unresolved"] is True
    assert [e["kind"] for e in ql3.json("local", "inspect", run["id"])["events"]].count(
        "leftovers_unresolved") == 1
    assert "UNRESOLVED" in ql3.run("local", "runs").stdout
    status = ql3.json("local", "recovery", "status")
    assert status["leftovers_unresolved"] == [run["id"]]
    text = ql3.run("local", "recovery", "status").stdout
    assert "1 ended run(s) with unresolved leftovers" in text and run["id"] in text
    holder = int(pidfile.read_text())
    assert _alive(holder)  # never found, so never signalled
    os.kill(holder, signal.SIGKILL)  # the fd in flight goes with it: the lock frees
    assert wait_for(lambda: ql3.json("local", "recovery", "status")["leftovers_unresolved"]
                    == [], 15)
    assert ql3.json("local", "runs")[0]["leftovers"]["unresolved"] is True  # history stays
