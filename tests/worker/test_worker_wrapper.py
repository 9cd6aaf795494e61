"""The worker's wrapper protocol on its own (docs/protocols.md §3.3, §4.2; case C18): the status
line, the release, the attempt lock, default signal dispositions; real processes."""

from __future__ import annotations

import os
import signal
import time

from qinglong.worker.process import spawn_attempt

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _spawn(tmp_path, script):
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        return spawn_attempt(["/bin/sh", "-c", script], ENV, None, out, tmp_path / "a.lock")
    finally:
        os.close(out)


def test_wrapper_reports_the_status_then_waits_for_release(tmp_path):
    proc = _spawn(tmp_path, "exit 7")
    assert _wait(proc) == 7
    time.sleep(0.2)
    assert proc.poll() is None  # still waiting for the worker's word
    assert not proc.lock.held()  # the wrapper dropped its copy of the lock
    assert proc.release() == 7
    assert not (tmp_path / "a.lock").exists()


def test_command_starts_with_default_pipe_and_term_dispositions(tmp_path):
    proc = _spawn(tmp_path, "grep ^SigIgn: /proc/self/status")
    assert _wait(proc) == 0
    proc.release()
    ignored = int((tmp_path / "out").read_text().split()[1], 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGHUP):
        assert not ignored & (1 << (sig - 1)), sig


def test_setsid_escapee_holds_the_lock_and_clear_leftovers_stops_it(tmp_path):
    proc = _spawn(tmp_path, "setsid sleep 30 & sleep 0.2; exit 0")
    assert _wait(proc) == 0
    assert proc.lock.held()
    [escapee] = proc.lock.holders()
    report = proc.clear_leftovers(2.0)
    assert (report.found, report.in_group, report.killed, report.unresolved) == (1, 0, 0, False)
    assert not os.path.exists(f"/proc/{escapee}") or _zombie(escapee)
    assert proc.release() == 0


def test_abandoned_wrapper_stops_the_escapee_itself(tmp_path):
    proc = _spawn(tmp_path, "trap '' TERM; setsid sleep 30 & sleep 0.2; exit 0")
    assert _wait(proc) == 0
    [escapee] = proc.lock.holders()
    proc.abandon()  # as if the worker died: the wrapper reads end-of-file
    deadline = time.monotonic() + 1.0
    while proc.poll() is None:  # it TERMs, waits 0.3 s, KILLs holders, then its own group
        assert time.monotonic() < deadline, "wrapper still waiting"
        time.sleep(0.01)
    assert proc.poll() == -signal.SIGKILL
    while not _zombie(escapee):  # KILLed by the wrapper; its exit may take a moment
        assert time.monotonic() < deadline + 0.5, "escapee survived the wrapper"
        time.sleep(0.01)


def _wait(proc):
    deadline = time.monotonic() + 10
    while (code := proc.wait(0.05)) is None:
        assert time.monotonic() < deadline
    return code


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except OSError:
        return True
