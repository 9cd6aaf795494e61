"""Spool files a killed worker leaves behind (``<attempt>.log``, ``<attempt>.lock``) are
removed when a worker starts on the directory: only attempts whose lock no process holds,
never a symlink or its target; with a live worker on the same directory nothing is touched.
Real ``ql3 worker run`` processes, a real SIGKILL, a real flock holder."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid

import pytest
from fake_control import make_attempt
from worker_kit import pids_running, unique_sleep, wait_until

pytestmark = pytest.mark.integration


def test_files_of_a_sigkilled_worker_are_removed_at_the_next_start_held_ones_kept(
        control, start_worker, tmp_path):
    spool = tmp_path / "spool"
    naptime = unique_sleep()
    control.queue.append(make_attempt(f"sleep {naptime}"))
    first = start_worker()
    control.wait_for("started")
    attempt_id = control.seen("started")[0]["lease"]["attempt_id"]
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)
    wait_until(lambda: not pids_running(["sleep", naptime]), 5.0, "attempt died with worker")
    # the wrapper holds the lock through its grace, then the lock is free
    wait_until(lambda: not _locked(spool / f"{attempt_id}.lock"), 10.0, "lock freed")
    # (bundles/ and work/ are the bundle cache and checkouts, empty here; the wrapper's
    # bytecode is the worker's program, not an attempt's file)
    left = {p.name for p in spool.iterdir() if not p.name.startswith(".group_wrapper-")
            } - {".worker-active", "bundles", "work"}
    assert left == {f"{attempt_id}.log", f"{attempt_id}.lock"}  # the reported leftovers

    # an attempt whose lock a process (an escapee) still holds: kept whole
    held = str(uuid.uuid4())
    (spool / f"{held}.log").write_bytes(b"still written\n")
    (spool / f"{held}.lock").touch(0o600)
    holder = subprocess.Popen(["flock", "-x", str(spool / f"{held}.lock"), "sleep", "60"])
    # a symlink named like a spool file, pointing outside: neither it nor its target touched
    target = tmp_path / "precious"
    target.write_text("keep me")
    linked = str(uuid.uuid4())
    (spool / f"{linked}.log").symlink_to(target)
    try:
        wait_until(lambda: _locked(spool / f"{held}.lock"), 5.0, "flock holder ready")
        second = start_worker()
        control.wait_for("register", count=2)
        wait_until(lambda: "stale spool file" in second.stderr(), 5.0, "cleanup logged")
        names = {p.name for p in spool.iterdir()}
        assert f"{attempt_id}.log" not in names, second.stderr()
        assert f"{attempt_id}.lock" not in names
        assert {f"{held}.log", f"{held}.lock", f"{linked}.log"} <= names
        assert os.path.islink(spool / f"{linked}.log")
        assert target.read_text() == "keep me"
        assert "removed 2 stale spool file(s)" in second.stderr(), second.stderr()
    finally:
        holder.kill()
        holder.wait(10)


def test_a_second_worker_on_a_live_workers_spool_touches_nothing(
        control, start_worker, tmp_path):
    spool = tmp_path / "spool"
    first = start_worker()
    control.wait_for("claim")
    stale = str(uuid.uuid4())
    (spool / f"{stale}.log").write_bytes(b"x")
    second = start_worker()  # same spool directory, the first still runs
    control.wait_for("register", count=2)
    wait_until(lambda: "used by another worker" in second.stderr(), 5.0, "logged")
    assert (spool / f"{stale}.log").exists()
    assert first.proc.poll() is None


def _locked(path) -> bool:
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
