"""The execution coordinator on real processes (docs/protocols.md §3.2-§3.3, issue 2 item 5)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from execution_kit import Stack

from qinglong.shared.errors import StorageError
from qinglong.shared.statuses import AttemptStatus, RunStatus

pytestmark = pytest.mark.integration


def _group_alive(pgid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    fields = fh.read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
                return True
    return False


def _reap_orphans() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def test_success_settles_from_the_receipt_then_deletes_it_and_resolves_the_journal(
    stack: Stack,
) -> None:
    run = stack.until_terminal(stack.start(stack.task("sh", "-c", "echo out; exit 0")).id)
    assert run.status is RunStatus.SUCCEEDED and run.exit_code == 0
    attempt = run.attempts[0]
    assert attempt.handle is not None and attempt.handle.startswith("ql3lp1:")
    # ADR-0069 §3 order: terminal commit, then delete the receipt, then resolve the journal.
    deadline = time.monotonic() + 5
    while stack.repo.journal_rows() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert stack.repo.journal_rows() == []
    assert stack.receipts.read(attempt.id) is None
    assert Path(attempt.log_path or "").read_text() == "out\n"


def test_a_failing_command_keeps_its_exit_code(stack: Stack) -> None:
    run = stack.until_terminal(stack.start(stack.task("sh", "-c", "exit 7")).id)
    assert (run.status, run.exit_code, run.signal) == (RunStatus.FAILED, 7, None)


def test_retries_use_new_attempt_numbers_until_max_attempts(stack: Stack) -> None:
    run = stack.until_terminal(stack.start(stack.task("false", max_attempts=3)).id)
    assert run.status is RunStatus.FAILED
    assert [a.number for a in run.attempts] == [1, 2, 3]
    assert all(a.status is AttemptStatus.FAILED for a in run.attempts)
    kinds = [e.kind for e in stack.repo.list_events(run.id)]
    assert kinds.count("run_requeued") == 2


def test_a_retry_that_succeeds_ends_the_run_succeeded(stack: Stack, tmp_path: Path) -> None:
    flag = tmp_path / "second-time"
    script = f"if [ -e {flag} ]; then exit 0; else touch {flag}; exit 1; fi"
    run = stack.until_terminal(stack.start(stack.task("sh", "-c", script, max_attempts=2)).id)
    assert run.status is RunStatus.SUCCEEDED
    assert [a.status for a in run.attempts] == [AttemptStatus.FAILED, AttemptStatus.SUCCEEDED]


def test_timeout_terms_the_wrapper_and_nothing_of_the_group_survives(stack: Stack) -> None:
    started = time.monotonic()
    run = stack.start(stack.task("sh", "-c", "sleep 300 & wait", timeout_s=1.0))
    assert run.attempts[0].deadline_at_ms is not None
    run = stack.until_terminal(run.id)
    assert time.monotonic() - started < 10
    assert run.status is RunStatus.TIMED_OUT
    assert run.signal == signal.SIGTERM and run.exit_code == 128 + signal.SIGTERM
    pgid = int((run.attempts[0].handle or "").split(":")[3])
    _reap_orphans()
    assert not _group_alive(pgid)


def test_a_command_that_ignores_term_is_killed_after_the_grace(stack: Stack) -> None:
    task = stack.task("sh", "-c", "trap '' TERM; sleep 300 & wait; wait", timeout_s=0.5)
    run = stack.until_terminal(stack.start(task).id)
    assert run.status is RunStatus.TIMED_OUT
    pgid = int((run.attempts[0].handle or "").split(":")[3])
    _reap_orphans()
    assert not _group_alive(pgid)


def test_cancel_stops_the_run_with_status_cancelled(stack: Stack) -> None:
    run = stack.start(stack.task("sleep", "300"))
    stack.repo.request_cancel(run.id)
    assert stack.coordinator.stop_run(run.id)
    run = stack.until_terminal(run.id)
    assert run.status is RunStatus.CANCELLED


def test_a_wrapper_killed_without_a_receipt_is_lost_with_no_invented_exit_code(
    stack: Stack,
) -> None:
    run = stack.start(stack.task("sleep", "300"))
    wrapper = int((run.attempts[0].handle or "").split(":")[2])
    os.kill(wrapper, signal.SIGKILL)
    run = stack.until_terminal(run.id)
    assert run.status is RunStatus.LOST
    assert run.exit_code is None
    events = [e for e in stack.repo.list_events(run.id) if e.kind == "attempt_lost"]
    assert events and "not_published" in (events[0].detail or "")


def test_a_failed_handle_write_kills_the_group_before_any_user_code_runs(
    stack: Stack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "ran"

    def broken(*args: object, **kwargs: object) -> None:
        raise StorageError("simulated failure of the handle write")

    monkeypatch.setattr(stack.repo, "save_handle", broken)
    with pytest.raises(StorageError):
        stack.start(stack.task("touch", str(marker)))
    time.sleep(0.3)
    assert not marker.exists()
    [attempt] = [a for r in stack.repo.list_runs() for a in r.attempts]
    receipt = stack.receipts.read(attempt.id)
    # The wrapper either saw the gate close (not_started) or was killed first: never ran.
    assert receipt is None or receipt.outcome.value == "not_started"


def test_a_missing_command_fails_with_127(stack: Stack) -> None:
    run = stack.until_terminal(stack.start(stack.task("/no/such/command")).id)
    assert (run.status, run.exit_code) == (RunStatus.FAILED, 127)


def test_the_command_sees_only_path_home_lang_and_its_own_env(stack: Stack) -> None:
    task = stack.task("sh", "-c", "env | sort", env={"GREETING": "hi"})
    run = stack.until_terminal(stack.start(task).id)
    names = {line.split("=", 1)[0] for line in Path(run.attempts[0].log_path or "")
             .read_text().splitlines()}
    assert "GREETING" in names and "PATH" in names
    assert not any(n.startswith(("QL3_", "PYTEST")) for n in names)
    assert names <= {"GREETING", "PATH", "PWD", "SHLVL", "_", "OLDPWD"}


def test_an_escaped_setsid_process_is_found_through_the_lock_and_killed_on_timeout(
    stack: Stack, tmp_path: Path
) -> None:
    pidfile = tmp_path / "escaped.pid"
    task = stack.task("sh", "-c", f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' & wait",
                      timeout_s=1.0)
    run = stack.until_terminal(stack.start(task).id)
    assert run.status is RunStatus.TIMED_OUT
    escaped = int(pidfile.read_text())
    _reap_orphans()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{escaped}").exists() and time.monotonic() < deadline:
        _reap_orphans()
        time.sleep(0.05)
    state = Path(f"/proc/{escaped}/stat").read_text().rpartition(")")[2].split()[0] \
        if Path(f"/proc/{escaped}").exists() else "gone"
    assert state in ("gone", "Z"), "the escaped process survived the timeout"
    events = [e for e in stack.repo.list_events(run.id) if e.kind == "leftovers_stopped"]
    assert len(events) == 1 and '"escaped": 1' in (events[0].detail or "")


def test_an_attempt_settled_elsewhere_meanwhile_frees_its_supervision_slot(
    stack: Stack, tmp_path: Path
) -> None:
    """From review: an operator's ``recovery resolve`` settling the attempt while the
    monitor waited made every settle retry a ConcurrentUpdateError, forever: the monitor
    never ended and the slot stayed counted against the cap until a restart."""
    from qinglong.shared.statuses import AttemptStatus

    go = tmp_path / "go"
    run = stack.start(stack.task("sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"))
    attempt = stack.repo.get_run(run.id).attempts[-1]
    stack.repo.finish_attempt(attempt, AttemptStatus.LOST)  # settled by someone else
    go.touch()  # the command exits; the monitor tries to settle the same attempt
    deadline = time.monotonic() + 20
    while stack.coordinator.active_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.coordinator.active_count() == 0
    assert stack.repo.get_run(run.id).attempts[-1].status is AttemptStatus.LOST


@pytest.mark.parametrize("step_ms", [-2 * 3_600_000, 2 * 3_600_000])
def test_a_wall_clock_step_neither_delays_nor_hastens_a_timeout_or_its_grace(
    stack: Stack, step_ms: int
) -> None:
    """Issue 10 item 3: timeouts and the grace before KILL were measured on the wall clock:
    stepped back two hours, a 1 s timeout fired two hours late; stepped forward, every
    running attempt timed out at once."""
    from qinglong.local.storage.repository import now_ms

    task = stack.task("sh", "-c", "trap '' TERM; sleep 300 & wait; wait", timeout_s=1.0)
    run = stack.start(task)
    stack.repo.clock = lambda: now_ms() + step_ms  # the wall clock steps after the start
    started = time.monotonic()
    run = stack.until_terminal(run.id, timeout=15)  # 1 s timeout + 1 s grace, then KILL
    assert run.status is RunStatus.TIMED_OUT and run.signal == signal.SIGKILL
    # never early (the forward step used to TERM at once and KILL after the grace alone,
    # about 1 s): the 1 s timeout and the 1 s grace both pass in real time
    assert time.monotonic() - started >= 1.5
