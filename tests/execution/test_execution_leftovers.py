"""Processes an attempt leaves behind after a normal exit (issue 10 item 5, case C18).

Real wrappers, real ``setsid`` daemons, real signals: what the leader leaves behind is found
(its group, the attempt lock), gets TERM, the grace period, KILL, and is recorded as an event
before the terminal commit; a lock whose holders cannot be found is recorded as unresolved.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from execution_kit import Stack

from qinglong.shared.domain import Event
from qinglong.shared.statuses import RunStatus

pytestmark = pytest.mark.integration

# The task's command starts a daemon that leaves the group (setsid) and writes its pid only
# once outside it; the command exits 0 only after that, so the daemon is surely an escapee.
ESCAPE = ("setsid sh -c 'echo $$ > {pid}.tmp; mv {pid}.tmp {pid}; exec sleep 300' & "
          "while [ ! -s {pid} ]; do sleep 0.01; done; exit 0")

# Holds the attempt lock with no process having it open (see the script's docstring).
INFLIGHT = Path(__file__).resolve().parents[1] / "scripts" / "hold_lock_in_flight.py"


def _gone(pid: int, timeout: float = 10) -> bool:
    """True once ``pid`` has exited (reaping it: the test process is the subreaper)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.02)
    return False


def _leftover_events(stack: Stack, run_id: str) -> list[Event]:
    return [e for e in stack.repo.list_events(run_id) if e.kind.startswith("leftovers_")]


@pytest.fixture
def strays(tmp_path: Path) -> Iterator[list[Path]]:
    """Pidfiles of processes a test may leave; every one still alive is KILLed after it."""
    files: list[Path] = []
    yield files
    for pidfile in files:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
                _gone(int(pidfile.read_text()))


def test_a_daemon_that_escaped_the_group_of_a_successful_run_is_stopped_and_recorded(
    stack: Stack, tmp_path: Path, strays: list[Path]
) -> None:
    pidfile = tmp_path / "daemon.pid"
    strays.append(pidfile)
    run = stack.until_terminal(stack.start(stack.task("sh", "-c", ESCAPE.format(pid=pidfile))).id)
    assert (run.status, run.exit_code) == (RunStatus.SUCCEEDED, 0)  # the receipt decides
    assert _gone(int(pidfile.read_text())), "the escaped daemon outlived its run"
    [event] = _leftover_events(stack, run.id)
    assert event.kind == "leftovers_stopped" and event.attempt_id == run.attempts[0].id
    assert json.loads(event.detail or "{}") | {"grace_s": None} == {
        "found": 1, "in_group": 0, "escaped": 1, "killed": 0, "grace_s": None}
    kinds = [e.kind for e in stack.repo.list_events(run.id)]
    assert kinds.index("leftovers_stopped") < kinds.index("attempt_succeeded")
    deadline = time.monotonic() + 5  # the lock is free: the journal row is resolved
    while stack.repo.journal_rows() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stack.repo.journal_rows() == []


@pytest.mark.parametrize("on_term", ["exit", "ignore"])
def test_a_child_left_in_the_group_gets_term_then_the_grace_before_kill(
    tmp_path: Path, strays: list[Path], on_term: str
) -> None:
    stack = Stack(tmp_path, grace_s=5.0)
    pidfile, seen = tmp_path / "child.pid", tmp_path / "child.saw"
    strays.append(pidfile)
    handler = f"echo term >> {seen}" + ("; exit 0" if on_term == "exit" else "")
    child = (f"trap '{handler}' TERM; echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; "
             "while :; do sleep 0.05; done")
    script = (f'sh -c "{child}" & while [ ! -s {pidfile} ]; do sleep 0.01; done; exit 3')
    try:
        run = stack.until_terminal(stack.start(stack.task("sh", "-c", script)).id, timeout=60)
        events = _leftover_events(stack, run.id)
    finally:
        stack.close()
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 3)
    assert _gone(int(pidfile.read_text()))
    assert seen.read_text() == "term\n"  # TERM came first, and only once
    [event] = events
    detail = json.loads(event.detail or "{}")
    # the child shell and the sleep it was running: all still in the group, none escaped
    assert event.kind == "leftovers_stopped" and detail["found"] >= 1
    assert (detail["in_group"], detail["escaped"]) == (detail["found"], 0)
    if on_term == "exit":
        assert detail["killed"] == 0  # it ended within the grace: no KILL
    else:
        assert detail["killed"] >= 1  # it ignored TERM: KILLed after the grace
    assert detail["grace_s"] == 5.0


def test_a_lock_held_while_its_holders_cannot_be_found_is_recorded_unresolved(
    stack: Stack, tmp_path: Path, strays: list[Path]
) -> None:
    pidfile, script = tmp_path / "holder.pid", INFLIGHT
    strays.append(pidfile)
    run = stack.until_terminal(
        stack.start(stack.task(sys.executable, str(script), str(pidfile))).id, timeout=30)
    assert (run.status, run.exit_code) == (RunStatus.SUCCEEDED, 0)
    attempt = run.attempts[0]
    [event] = _leftover_events(stack, run.id)
    detail = json.loads(event.detail or "{}")
    assert (event.kind, detail["found"], detail["lock"]) == ("leftovers_unresolved", 0, "held")
    assert stack.receipts.lock_held(attempt.id)
    assert stack.repo.unresolved_leftover_runs() == [(run.id, attempt.id)]
    # never "done": the journal row stays until the cleanup scanner sees the lock free
    assert [row[0] for row in stack.repo.journal_rows()] == [attempt.id]
    assert Path(stack.receipts.lock_path(attempt.id)).exists()
