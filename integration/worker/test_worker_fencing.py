"""The worker fences itself (issue 11 item 4; docs/protocols.md §4.2; cases C11, C21): real worker
process, real process groups, real signals; control is an in-process HTTP fake."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from fake_control import LEASE_MS, make_attempt
from worker_kit import live_members, pids_running, unique_sleep, wait_group_gone, wait_until

pytestmark = pytest.mark.integration

BACKGROUNDED = "sleep 300 & sleep 301 & wait"
# A lease long beside the heartbeat: the worker's own deadline would fence the attempt only
# after LONG_LEASE_S less its margin, so a group gone well before that was stopped by the 409.
LONG_LEASE_S = 30.0
AT_ONCE_S = LONG_LEASE_S / 3


def test_worker_sigkill_takes_the_attempts_processes_with_it(control, start_worker):
    control.queue.append(make_attempt(BACKGROUNDED))
    worker = start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    time.sleep(0.2)
    assert len(live_members(pgid)) >= 3  # wrapper, sh and both sleeps
    worker.proc.send_signal(signal.SIGKILL)
    # the wrapper reads end-of-file: everything is gone before the lease could end
    wait_group_gone(pgid, timeout_s=LEASE_MS / 1000)


def test_control_silent_worker_kills_attempt_before_the_lease_could_expire(control,
                                                                          start_worker):
    attempt = make_attempt(BACKGROUNDED, lease_ms=3000, heartbeat_ms=500)
    control.queue.append(attempt)
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    control.wait_for("heartbeat", count=2)
    control.heartbeat_status = 503  # control unreachable from now on
    last_ok = control.last_ok_heartbeat[attempt["lease"]["attempt_id"]]
    gone_at = wait_group_gone(pgid, timeout_s=4.0)
    assert gone_at < last_ok + 3.0  # before the lease, renewed no later than last_ok, ends
    assert control.seen("complete") == []


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rpartition(")")[2].split()[0]


def _freeze_on_next_heartbeat(control, worker) -> threading.Event:
    """Arm the fake: the next heartbeat request stops the worker (SIGSTOP, seen stopped in
    /proc) before its answer is written, so the worker is frozen with a heartbeat in flight
    and reads that answer only when it resumes — the worst case for the fence, made certain
    rather than left to chance. The event is set once the worker is stopped."""
    frozen = threading.Event()

    def hook(_body: object) -> None:
        control.hooks.pop("heartbeat", None)
        worker.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(worker.proc.pid) == "T", 5.0, "worker stopped")
        frozen.set()

    control.hooks["heartbeat"] = hook
    return frozen


def _no_completion_within(control, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert control.seen("complete") == []
        assert control.seen("log-upload") == []
        time.sleep(0.05)


def test_frozen_worker_attempt_dies_by_the_wrappers_copy_of_the_fence(control, start_worker):
    """A worker stopped (SIGSTOP) cannot kill anything; the wrapper holds its fence
    deadline and kills the group before the lease, renewed no later than last_ok, ends. The
    worker is frozen with a heartbeat in flight (the answer it reads on resuming would renew
    a live fence): it must still forget the attempt."""
    attempt = make_attempt(BACKGROUNDED, lease_ms=3000, heartbeat_ms=1000)
    control.queue.append(attempt)
    worker = start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    control.wait_for("heartbeat", count=1)
    frozen = _freeze_on_next_heartbeat(control, worker)
    try:
        assert frozen.wait(5.0)
        last_ok = control.last_ok_heartbeat[attempt["lease"]["attempt_id"]]
        gone_at = wait_group_gone(pgid, timeout_s=4.0)
        assert gone_at < last_ok + 3.0
    finally:
        worker.proc.send_signal(signal.SIGCONT)
    _no_completion_within(control, 2.0)


def test_frozen_worker_with_a_heartbeat_in_flight_never_completes(control, start_worker):
    """The command ended by itself; its leftover ignores TERM, so the worker waits out the
    grace (5 s) before its KILL. Frozen then, with a heartbeat in flight, past its fence: the
    wrapper KILLs the leftover on its copy of the deadline. On resuming, the worker reads the
    heartbeat's 200 (sent before the deadline, so it would move it 1 s past now): a fence that
    passed stays passed, and the attempt is forgotten — no log upload, no completion."""
    sleeper = unique_sleep()
    control.queue.append(make_attempt(f"( trap '' TERM; exec sleep {sleeper} ) & exit 0",
                                      lease_ms=3000, heartbeat_ms=1000))
    worker = start_worker("--grace", "5")
    pgid = control.wait_for("started")[0]["pid"]
    wait_until(lambda: len(pids_running(["sleep", sleeper])) == 1, 5.0, "leftover running")
    leftover = pids_running(["sleep", sleeper])[0]
    wait_until(lambda: len(live_members(pgid)) == 2, 5.0, "sh ended (wrapper + leftover)")
    time.sleep(0.2)  # the worker sends its TERM within a supervision tick (50 ms)
    frozen = _freeze_on_next_heartbeat(control, worker)
    try:
        assert frozen.wait(5.0)
        wait_until(lambda: not pids_running(["sleep", sleeper]), 4.0,
                   f"leftover {leftover} killed by the wrapper's fence")
    finally:
        worker.proc.send_signal(signal.SIGCONT)
    _no_completion_within(control, 3.0)
    assert "fence" in worker.stderr()


def test_409_on_heartbeat_kills_the_group_at_once_and_never_completes(control, start_worker):
    control.queue.append(make_attempt(BACKGROUNDED, lease_ms=int(LONG_LEASE_S * 1000),
                                      heartbeat_ms=500))
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    control.heartbeat_status = 409
    wait_group_gone(pgid, timeout_s=AT_ONCE_S)  # the next heartbeat (0.5 s) and the kill
    time.sleep(0.5)
    assert control.seen("complete") == []
    assert control.seen("log-upload") == []


def test_claim_with_heartbeat_above_a_third_of_the_lease_is_refused(control, start_worker):
    control.queue.append(make_attempt("echo ran", lease_ms=3000, heartbeat_ms=1500))
    worker = start_worker()
    control.wait_for("claim", count=2)
    time.sleep(0.3)
    assert control.seen("started") == []
    line = next(x for x in worker.stderr().splitlines() if "refused" in x)
    assert "1500" in line
    assert "3000" in line


def test_cancel_in_the_heartbeat_answer_stops_the_group_and_completes_cancelled(
        control, start_worker):
    control.queue.append(make_attempt(BACKGROUNDED, lease_ms=3000, heartbeat_ms=500))
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    until = time.monotonic() + 5.0  # "started" comes before sh has forked both sleeps
    while len(live_members(pgid)) < 3 and time.monotonic() < until:
        time.sleep(0.02)
    assert len(live_members(pgid)) >= 3
    control.cancel = True
    done = control.wait_for("complete", timeout_s=5.0)[0]
    assert (done["outcome"], done["reason"]) == ("cancelled", "cancel_requested")
    assert done["signal"] == signal.SIGTERM  # sh died of the group's TERM within the grace
    assert live_members(pgid) == []  # stopped before the completion was sent


def test_409_on_started_kills_the_group_at_once_and_sends_nothing_more(control,
                                                                      start_worker):
    control.force["started"] = 409
    control.queue.append(make_attempt(BACKGROUNDED, lease_ms=int(LONG_LEASE_S * 1000),
                                      heartbeat_ms=500))
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    wait_group_gone(pgid, timeout_s=AT_ONCE_S)  # at the 409's answer, not at the deadline
    time.sleep(0.7)  # more than one heartbeat period
    assert [control.seen(r) for r in ("complete", "log-upload")] == [[], []]
    assert len(control.seen("started")) == 1  # a 409 is never retried


def test_409_on_complete_is_final_and_the_worker_keeps_claiming(control, start_worker):
    control.force["complete"] = 409
    control.queue.append(make_attempt("echo done", lease_ms=3000, heartbeat_ms=500))
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    control.wait_for("complete")
    time.sleep(1.2)  # two heartbeat periods
    with control.lock:
        routes = [r for _, r, _ in control.log]
    after = routes[routes.index("complete") + 1:]
    assert set(after) == {"claim"}  # no retry, heartbeat or upload: only new claims
    assert live_members(pgid) == []
