"""The worker's wrapper protocol on its own (docs/protocols.md §3.3, §4.2; case C18): the status
line, the release, the attempt lock, default signal dispositions; real processes."""

from __future__ import annotations

import importlib.util
import marshal
import os
import signal
import sys
import time

import qinglong.worker.process as process_module
from qinglong.worker.process import spawn_attempt, wrapper_program

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
# a child that closes every inherited fd but 0-2 (the lock's included), stays in the group
CLOSE_ALL_AND_SLEEP = (f"{sys.executable} -c 'import os, sys; os.closerange(3, 1 << 16); "
                       f"os.execvp(\"sleep\", [\"sleep\", sys.argv[1]])' "
                       f"</dev/null >/dev/null 2>&1")
UNTIL_FDS_CLOSED = 'while [ "$(ls /proc/$!/fd | wc -l)" -gt 3 ]; do sleep 0.05; done;'


def _spawn(tmp_path, script):
    out = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        return spawn_attempt(["/bin/sh", "-c", script], ENV, None, out, tmp_path / "a.lock")
    finally:
        os.close(out)


def _cmdline(pid, timeout_s=10.0):
    """The argv of a live ``pid`` from /proc. Right after an exec the kernel can answer an
    empty cmdline for a moment (the new image's argument pages not yet readable; seen under
    load), so an empty answer is read again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
        if raw or time.monotonic() > deadline:
            return raw.split(b"\0")
        time.sleep(0.01)


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


def test_a_child_that_closed_the_lock_in_the_group_is_found_after_a_free_lock(tmp_path):
    """The quick "nothing left" look (a free lock) is not enough: a child that closed its
    copy of the lock fd but stayed in the group is still found, by the group look, and
    stopped (docs/protocols.md §4.2 "Attempt lock and leftovers")."""
    proc = _spawn(tmp_path, f"{CLOSE_ALL_AND_SLEEP} 30 & {UNTIL_FDS_CLOSED} exit 0")
    assert _wait(proc) == 0
    assert not proc.lock.held()  # no process holds the lock any more
    [child] = proc.others_in_group()
    report = proc.clear_leftovers(2.0)
    assert (report.found, report.in_group, report.unresolved) == (1, 0, False)
    assert _zombie(child)
    assert proc.release() == 0


def test_nothing_left_is_an_empty_report_and_the_lock_file_goes(tmp_path):
    proc = _spawn(tmp_path, "exit 0")
    assert _wait(proc) == 0
    report = proc.clear_leftovers(2.0)
    assert (report.found, report.unresolved) == (0, False)
    assert proc.release() == 0
    assert not (tmp_path / "a.lock").exists()


def test_the_wrapper_runs_from_bytecode_written_by_this_worker(tmp_path):
    """The wrapper starts from bytecode compiled into the spool directory; a file already
    there under that name (another writer's) is replaced, never run."""
    program = wrapper_program(tmp_path)
    assert program.endswith(".pyc") and os.path.dirname(program) == str(tmp_path)
    process_module._PROGRAMS.clear()  # as a new worker process would start
    with open(program, "wb") as fh:  # planted: exits 99 whatever it is asked
        fh.write(importlib.util.MAGIC_NUMBER + b"\0" * 12 + marshal.dumps(
            compile("raise SystemExit(99)", "planted", "exec")))
    proc = _spawn(tmp_path, "exit 7")
    assert _cmdline(proc.pid)[3] == program.encode()
    assert _wait(proc) == 7
    assert proc.release() == 7


def test_an_unwritable_spool_directory_starts_the_wrapper_from_its_source(tmp_path):
    (tmp_path / "a-file").write_bytes(b"")  # no directory can be made below a file
    assert wrapper_program(tmp_path / "a-file" / "spool") == str(process_module.WRAPPER_PATH)
