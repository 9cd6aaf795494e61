"""Processes left behind by the attempt's command, in its group or out of it (case C18;
docs/protocols.md §3.3 attempt lock, §4.2; issue 11 items 4 and 6): a real `ql3 worker run`,
real `setsid` escapees, real signals."""

from __future__ import annotations

import signal
import sys
import time

import pytest
from fake_control import LEASE_MS, make_attempt
from worker_kit import live_members, pids_running, unique_sleep, wait_until

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("pause", ["", "sleep 0.3; "],
                         ids=["as_in_c18", "escaped_before_the_leader_exits"])
def test_c18_setsid_escapee_is_stopped_and_recorded_the_exit_code_decides(
        control, start_worker, tmp_path, pause):
    """Case C18, as locally: the leftovers are stopped and recorded (reason
    ``leftovers_stopped``, never a silent success); the outcome is the exit code's, so a
    script that succeeded is not retried (its side effects would happen twice)."""
    naptime = unique_sleep()
    # with the pause, setsid has certainly run before the leader exits: out of the group
    control.queue.append(make_attempt(f"setsid sleep {naptime} & {pause}exit 0"))
    start_worker()
    done = control.wait_for("complete", timeout_s=10.0)[0]
    assert (done["outcome"], done["reason"], done["exit_code"]) == (
        "succeeded", "leftovers_stopped", 0)
    assert pids_running(["sleep", naptime]) == []  # stopped before the completion was sent
    assert list((tmp_path / "spool").glob("*.lock")) == []  # lock free, file discarded


def test_escapee_ignoring_term_is_killed_after_the_grace(control, start_worker):
    naptime = unique_sleep()
    control.queue.append(make_attempt(
        f"trap '' TERM; setsid sleep {naptime} & exit 3"))
    start_worker()  # --grace 0.5
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 30.0, "escapee started")
    done = control.wait_for("complete", timeout_s=10.0)[0]
    assert (done["outcome"], done["reason"], done["exit_code"]) == (
        "failed", "leftovers_stopped", 3)
    assert pids_running(["sleep", naptime]) == []


def test_a_background_child_in_the_group_is_stopped_and_a_success_stays_a_success(
        control, start_worker):
    """A Qinglong-style script that leaves ``nohup … &`` behind and exits 0: the child is
    stopped, the attempt succeeds with the leftovers recorded (not failed, so not retried)."""
    naptime = unique_sleep()
    control.queue.append(make_attempt(
        f"nohup sleep {naptime} >/dev/null 2>&1 & echo started"))
    start_worker()
    done = control.wait_for("complete", timeout_s=10.0)[0]
    assert (done["outcome"], done["reason"], done["exit_code"]) == (
        "succeeded", "leftovers_stopped", 0)
    assert pids_running(["sleep", naptime]) == []


def test_a_child_that_closed_the_lock_and_stayed_in_the_group_is_still_stopped(
        control, start_worker):
    """The lock is free once the command ends, yet a child that closed every inherited fd
    (the lock's included) and stayed in the group lives on: the group look finds it, it is
    stopped before the completion and recorded (docs/protocols.md §4.2 "Attempt lock and
    leftovers")."""
    naptime = unique_sleep()
    control.queue.append(make_attempt(
        f"{sys.executable} -c 'import os, sys; os.closerange(3, 1 << 16); "
        f"os.execvp(\"sleep\", [\"sleep\", sys.argv[1]])' {naptime} "
        f"</dev/null >/dev/null 2>&1 & "
        f'while [ "$(ls /proc/$!/fd | wc -l)" -gt 3 ]; do sleep 0.05; done; exit 0'))
    start_worker()
    done = control.wait_for("complete", timeout_s=10.0)[0]
    assert (done["outcome"], done["reason"], done["exit_code"]) == (
        "succeeded", "leftovers_stopped", 0)
    assert pids_running(["sleep", naptime]) == []


def test_clean_exit_without_leftovers_still_succeeds(control, start_worker):
    control.queue.append(make_attempt("sleep 0.1 & wait; echo ok"))
    start_worker()
    done = control.wait_for("complete")[0]
    assert (done["outcome"], done["reason"], done["exit_code"]) == ("succeeded", None, 0)


def test_worker_sigkill_after_the_command_exited_takes_the_escapee_with_it(control,
                                                                           start_worker):
    naptime = unique_sleep()
    # the escapee ignores TERM (set by the shell before the fork), so the worker is still
    # inside its 30 s grace when it dies
    control.queue.append(make_attempt(
        f"trap '' TERM; setsid sleep {naptime} & exit 0"))
    worker = start_worker("--grace", "30")
    pgid = control.wait_for("started")[0]["pid"]
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 30.0, "escapee started")
    wait_until(lambda: live_members(pgid) == [pgid], 30.0, "command exited, wrapper waiting")
    time.sleep(0.2)  # the worker has its status and is stopping leftovers
    assert pids_running(["sleep", naptime])  # TERM ignored: still alive
    worker.proc.send_signal(signal.SIGKILL)
    # the wrapper reads end-of-file and stops the escapee before the lease could end
    wait_until(lambda: not pids_running(["sleep", naptime]), LEASE_MS / 1000, "escapee gone")
    wait_until(lambda: not live_members(pgid), 1.0, "wrapper gone")
    assert control.seen("complete") == []


def test_worker_sigkill_while_the_command_runs_takes_the_escapee_with_it(control,
                                                                         start_worker):
    naptime = unique_sleep()
    control.queue.append(make_attempt(f"setsid sleep {naptime} & sleep 300"))
    worker = start_worker()
    control.wait_for("started")
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 30.0, "escapee started")
    worker.proc.send_signal(signal.SIGKILL)
    # the wrapper reads end-of-file and stops the escapee before the lease could end
    wait_until(lambda: not pids_running(["sleep", naptime]), LEASE_MS / 1000, "escapee gone")
