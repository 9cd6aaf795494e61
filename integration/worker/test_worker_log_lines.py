"""The worker's own log through a real ``ql3 worker run`` (docs/operations.md, worker log):
runs are named as people type them (``TASK#N``), never by a UUID; an attempt's start is
logged as well as its end; every line carries the worker's name."""

from __future__ import annotations

import re

import pytest
from fake_control import make_attempt
from worker_kit import wait_until

pytestmark = pytest.mark.integration

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def test_log_lines_name_the_run_its_start_and_end_and_the_worker(control, start_worker):
    attempt = make_attempt("echo 签到成功")
    attempt.update(task_name="京东签到", run_number=3, attempt_number=2)
    control.queue.append(attempt)
    worker = start_worker("--name", "edge-w7")
    assert control.wait_for("complete")[0]["outcome"] == "succeeded"
    wait_until(lambda: "京东签到#3 attempt 2: completed succeeded" in worker.stderr(), 10,
               "the completion line")
    lines = worker.stderr().splitlines()
    started = [i for i, line in enumerate(lines) if "京东签到#3 attempt 2: starting" in line]
    ended = [i for i, line in enumerate(lines) if "京东签到#3 attempt 2: completed" in line]
    assert started and ended and started[0] < ended[0], lines
    ours = [line for line in lines if "ql3-worker" in line]
    assert ours and all(" ql3-worker edge-w7 " in line for line in ours), ours
    # the run and the attempt are never named by their UUIDs (the worker's own incarnation
    # id, logged once at registration, is not a run's)
    log = worker.stderr()
    assert attempt["run_id"] not in log and attempt["lease"]["attempt_id"] not in log, log
    assert not [line for line in lines if "京东签到" in line and UUID.search(line)], lines
