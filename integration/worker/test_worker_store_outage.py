"""The object store down when an attempt ends (docs/protocols.md §4.2 "Completion and the
worker's log"): the attempt keeps its lease while its log upload is tried again, holds no
``--concurrency`` slot meanwhile, and past the bound completes with ``log_unavailable``.
Real worker process; the fake control's presigned PUT target plays S3."""

from __future__ import annotations

import time

import pytest
from fake_control import make_attempt
from worker_kit import wait_until

pytestmark = pytest.mark.integration


def test_the_lease_is_kept_while_s3_is_down_and_the_log_stored_when_it_returns(
        control, start_worker):
    control.put_status = 503
    control.queue.append(make_attempt("echo 你好", lease_ms=3000, heartbeat_ms=1000))
    start_worker()
    wait_until(lambda: control.put_tries, 10.0, "a first PUT")
    first_try = control.put_tries[0][0]
    beats_then = len(control.seen("heartbeat"))
    # well past the lease (3 s) and the fence taken when the upload started
    wait_until(lambda: time.monotonic() - first_try > 6.0, 10.0, "S3 down for 6 s")
    assert control.seen("complete") == []
    assert len(control.seen("heartbeat")) >= beats_then + 4  # renewals went on
    control.put_status = 200
    done = control.wait_for("complete", timeout_s=10.0)[0]
    assert (done["outcome"], done["reason"]) == ("succeeded", None)
    assert done["log"] is not None
    assert control.puts[-1][1] == "你好\n".encode()


def test_past_the_bound_the_attempt_completes_log_unavailable_naming_s3(control,
                                                                        start_worker):
    control.put_status = 503
    control.queue.append(make_attempt("echo done; exit 3", lease_ms=3000, heartbeat_ms=1000))
    worker = start_worker("--log-upload-bound", "4")
    done = control.wait_for("complete", timeout_s=20.0)[0]
    assert (done["outcome"], done["exit_code"], done["reason"], done["log"]) == (
        "failed", 3, "log_unavailable", None)
    assert done["lease"]["attempt_id"]
    assert time.monotonic() - control.put_tries[0][0] >= 3.5  # the bound, not the fence
    err = worker.stderr()
    assert "object store (S3) unavailable" in err
    assert "control unavailable" not in err.lower()


def test_an_attempt_storing_its_log_holds_no_concurrency_slot(control, start_worker):
    control.put_status = 503
    first = make_attempt("echo first", lease_ms=3000, heartbeat_ms=1000)
    second = make_attempt("echo second", lease_ms=3000, heartbeat_ms=1000)
    control.queue += [first, second]
    start_worker("--concurrency", "1")
    started = control.wait_for("started", timeout_s=15.0, count=2)
    assert [s["lease"]["attempt_id"] for s in started] == [
        first["lease"]["attempt_id"], second["lease"]["attempt_id"]]
    assert control.seen("complete") == []  # the first still stores its log
    control.put_status = 200
    control.wait_for("complete", timeout_s=15.0, count=2)
