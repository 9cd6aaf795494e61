"""Attempts on a real worker (issue 11 item 6; docs/protocols.md §4.2; case C01): timeout, log cap,
the presigned PUT, the clean environment and the token, the SIGTERM drain."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess

import pytest
from fake_control import TOKEN, make_attempt
from worker_kit import wait_group_gone

from qinglong.worker.spool import marker_line

pytestmark = pytest.mark.integration


def test_timeout_kills_background_children_and_reports_timed_out(control, start_worker):
    control.queue.append(make_attempt("sleep 300 & sleep 301 & wait", timeout_ms=1000))
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    done = control.wait_for("complete", timeout_s=5.0)[0]
    assert done["outcome"] == "timed_out"
    wait_group_gone(pgid, timeout_s=0.5)


def test_output_is_capped_at_the_log_limit_with_one_marker_line(control, start_worker):
    control.queue.append(make_attempt("head -c 10000 /dev/zero | tr '\\0' a; echo tail",
                                      log_limit_bytes=100))
    start_worker()
    done = control.wait_for("complete")[0]
    _headers, body = control.puts[0]
    # head: 50 bytes; tail: two 25-byte segments, the last full one and the current one
    # (9955 bytes past the head = 398 × 25 + 5: 30 bytes kept)
    marker = marker_line(10005 - 50 - 30, after_newline=False)
    assert body == b"a" * 50 + marker + b"a" * 25 + b"tail\n"
    assert done["layout"] == {"raw_bytes": 10005, "head_bytes": 50, "tail_offset": 9975}
    assert done["log"] == {"sha256": hashlib.sha256(body).hexdigest(), "size_bytes": len(body),
                           "content_type": "text/plain; charset=utf-8"}
    assert done["outcome"] == "succeeded"
    assert done["exit_code"] == 0


def test_log_put_carries_exactly_the_granted_headers_and_never_the_token(control,
                                                                        start_worker):
    control.queue.append(make_attempt("echo hello"))
    start_worker()
    control.wait_for("complete")
    headers, body = control.puts[0]
    assert body == b"hello\n"
    for name, value in control.grant_headers.items():
        assert headers[name] == value
    assert set(headers) - set(control.grant_headers) <= {"host", "content-length"}
    assert TOKEN not in str(headers)


def test_attempt_gets_a_clean_environment_without_the_token(control, start_worker, tmp_path):
    out = tmp_path / "env.txt"
    control.queue.append(make_attempt(f"env > {out}", env={"TASK_VAR": "1"}, cwd=str(tmp_path)))
    start_worker()
    control.wait_for("complete")
    names = {line.partition("=")[0] for line in out.read_text().splitlines()}
    assert "TASK_VAR" in names
    assert "QL3_WORKER_TOKEN" not in names
    assert "QL3_WORKER_TEST_SENTINEL" not in names
    assert "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" in out.read_text()


def test_missing_cwd_fails_the_attempt_with_a_reason(control, start_worker, tmp_path):
    control.queue.append(make_attempt("true", cwd=str(tmp_path / "absent")))
    start_worker()
    done = control.wait_for("complete")[0]
    assert (done["outcome"], done["reason"]) == ("failed", "cwd_missing")
    assert control.seen("started") == []


def test_worker_is_not_dumpable_so_its_proc_files_belong_to_root(control, start_worker):
    # /proc/<pid>/environ (the initial environment block, which still holds the token after
    # unsetenv) belongs to the process's euid/egid, or to root:root once it is non-dumpable.
    # Run under another gid so the two differ even when the tests run as root.
    other_gid = 65534
    reference = subprocess.Popen(["sleep", "30"], group=other_gid)
    try:
        assert os.stat(f"/proc/{reference.pid}/environ").st_gid == other_gid
    finally:
        reference.kill()
        reference.wait()
    control.queue.append(make_attempt("sleep 300"))
    worker = start_worker(group=other_gid)
    control.wait_for("started")
    assert os.stat(f"/proc/{worker.proc.pid}/environ").st_gid == 0
    if os.getuid() != 0:  # a same-uid reader is refused
        with pytest.raises(PermissionError), open(f"/proc/{worker.proc.pid}/environ") as fh:
            fh.read()


def test_sigterm_drains_finishing_attempts_and_stops_the_rest(control, start_worker):
    control.queue.extend([make_attempt("sleep 0.5; echo done"), make_attempt("sleep 300")])
    worker = start_worker("--concurrency", "2", "--drain-budget", "1.5")
    control.wait_for("started", count=2)
    worker.proc.send_signal(signal.SIGTERM)
    # budget (1.5 s) + grace + reporting, with room for a loaded host; a drain that waited
    # for the unfinished attempt would take its 300 s
    assert worker.proc.wait(30.0) == 0
    outcomes = sorted((c["outcome"], c["reason"]) for c in control.seen("complete"))
    assert outcomes == [("failed", "worker_drain"), ("succeeded", None)]
    assert len(control.seen("stopped")) == 1
    assert len(control.seen("claim")) >= 1
