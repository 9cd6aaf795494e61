"""A worker whose token control refuses (issue: a revoked token looped forever). A real
``ql3 worker run`` against the fake control: a 401 after registration stops the worker,
its running attempt is stopped (it could not be reported anyway), one clear line, exit 1.
A 403 ``labels_outside_pool`` at registration names the code and what it means."""

from __future__ import annotations

import pytest
from fake_control import make_attempt
from worker_kit import pids_running, unique_sleep, wait_until

pytestmark = pytest.mark.integration

LINE = "the worker token was refused (401): revoked or unknown; stopping"


def test_token_revoked_while_running_stops_the_attempt_and_exits_1_with_one_line(
        control, start_worker):
    naptime = unique_sleep()
    control.queue.append(make_attempt(f"sleep {naptime}"))
    worker = start_worker()
    control.wait_for("started")
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 5.0, "sleeper started")

    control.revoked = True  # every request from now on: 401

    assert worker.proc.wait(15) == 1, worker.stderr()
    err = worker.stderr()
    assert err.count(LINE) == 1, err
    assert "claim failed" not in err  # no once-a-second loop of the same failure
    assert pids_running(["sleep", naptime]) == []  # stopped, not left running
    assert "Traceback" not in err


def test_token_revoked_while_idle_stops_the_worker_at_its_next_claim(control, start_worker):
    worker = start_worker()
    control.wait_for("claim")
    control.revoked = True
    assert worker.proc.wait(10) == 1, worker.stderr()
    assert worker.stderr().count(LINE) == 1


def test_labels_outside_the_pool_at_registration_name_the_code(control, start_worker):
    control.force["register"] = 403
    control.force_code["register"] = "labels_outside_pool"
    worker = start_worker("--labels", "zone=b")
    assert worker.proc.wait(15) == 1, worker.stderr()
    err = worker.stderr()
    assert "labels_outside_pool" in err, err
    assert "declared labels (--labels) are outside the token's pool" in err
    assert "forbidden for this token" not in err
    assert control.seen("claim") == []
