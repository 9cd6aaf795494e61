"""The worker fences itself (issue 11 item 4; docs/protocols.md §4.2; cases C11, C21): real worker
process, real process groups, real signals; control is an in-process HTTP fake."""

from __future__ import annotations

import signal
import time

import pytest
from fake_control import make_attempt
from worker_kit import live_members, wait_group_gone

pytestmark = pytest.mark.integration

BACKGROUNDED = "sleep 300 & sleep 301 & wait"


def test_worker_sigkill_takes_the_attempts_processes_with_it(control, start_worker):
    control.queue.append(make_attempt(BACKGROUNDED))
    worker = start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    time.sleep(0.2)
    assert len(live_members(pgid)) >= 3  # wrapper, sh and both sleeps
    killed_at = time.monotonic()
    worker.proc.send_signal(signal.SIGKILL)
    gone_at = wait_group_gone(pgid, timeout_s=2.0)
    assert gone_at - killed_at < 1.0


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


def test_frozen_worker_attempt_dies_by_the_wrappers_copy_of_the_fence(control, start_worker):
    """C21: a worker stopped (SIGSTOP) cannot kill anything; the wrapper holds its fence
    deadline and kills the group before the lease, renewed no later than last_ok, ends."""
    attempt = make_attempt(BACKGROUNDED, lease_ms=3000, heartbeat_ms=500)
    control.queue.append(attempt)
    worker = start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    control.wait_for("heartbeat", count=2)
    worker.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(0.1)  # a heartbeat already in flight lands
        last_ok = control.last_ok_heartbeat[attempt["lease"]["attempt_id"]]
        gone_at = wait_group_gone(pgid, timeout_s=4.0)
        assert gone_at < last_ok + 3.0
    finally:
        worker.proc.send_signal(signal.SIGCONT)
    time.sleep(0.5)
    assert control.seen("complete") == []


def test_409_on_heartbeat_kills_the_group_at_once_and_never_completes(control, start_worker):
    control.queue.append(make_attempt(BACKGROUNDED, lease_ms=3000, heartbeat_ms=500))
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    control.heartbeat_status = 409
    first_409 = time.monotonic()
    wait_group_gone(pgid, timeout_s=1.5)
    assert time.monotonic() - first_409 < 1.5  # one heartbeat period + the kill
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
    control.queue.append(make_attempt(BACKGROUNDED, lease_ms=3000, heartbeat_ms=500))
    start_worker()
    started_at = time.monotonic()
    pgid = control.wait_for("started")[0]["pid"]
    wait_group_gone(pgid, timeout_s=1.5)
    assert time.monotonic() - started_at < 1.5
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
