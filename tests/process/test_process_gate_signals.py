"""Start gate, graceful signals, group kill and the attempt lock (docs/protocols.md §3.2–§3.3)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from process_testkit import Env, group_gone, group_members, kill_quietly, reap_child, wait_until

from qinglong.local.process.launch_request import LaunchRequest
from qinglong.local.process.launcher import WRAPPER_EXIT_NOT_STARTED
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.shared.receipts import ReceiptOutcome

pytestmark = pytest.mark.integration

OWNER = """
import sys, time
from qinglong.local.process.launch_request import LaunchConfig, LaunchRequest
from qinglong.local.process.launcher import LocalProcessLauncher

class Journal:
    def register(self, run_id, attempt_id, receipt_path):
        pass

log_root, receipt_root, run_id, attempt_id, marker, path, cwd, output = sys.argv[1:]
launcher = LocalProcessLauncher(LaunchConfig(log_root, receipt_root), Journal())
request = LaunchRequest(run_id, attempt_id, ("touch", marker), {"PATH": path}, cwd, output)
proc = launcher.start(request)
print(proc.pid, flush=True)
time.sleep(60)
"""

CLOSED_STDIO_OWNER = """
import os, sys
for fd in (0, 1, 2):
    os.close(fd)
from qinglong.local.process.launch_request import LaunchConfig, LaunchRequest
from qinglong.local.process.launcher import LocalProcessLauncher

class Journal:
    def register(self, run_id, attempt_id, receipt_path):
        pass

log_root, receipt_root, run_id, attempt_id, marker, path, cwd, output = sys.argv[1:]
launcher = LocalProcessLauncher(LaunchConfig(log_root, receipt_root), Journal())
request = LaunchRequest(run_id, attempt_id, ("touch", marker), {"PATH": path}, cwd, output)
with launcher.start(request) as proc:
    proc.open_gate()
    sys.exit(proc.wait(10))
"""


def owner_args(env: Env, request: LaunchRequest) -> list[str]:
    return [
        str(env.log_root),
        str(env.receipt_root),
        request.run_id,
        request.attempt_id,
        str(env.marker),
        os.environ["PATH"],
        request.cwd,
        request.output_path,
    ]


def test_an_owner_with_closed_stdio_still_launches(env: Env) -> None:
    request = env.request()
    argv = [sys.executable, "-c", CLOSED_STDIO_OWNER, *owner_args(env, request)]
    owner = subprocess.run(argv, check=False, timeout=20)
    assert owner.returncode == 0
    assert env.marker.exists()
    receipt = ReceiptStore(str(env.receipt_root)).read(request.attempt_id)
    assert receipt is not None
    assert (receipt.outcome, receipt.exit_code) == (ReceiptOutcome.EXITED, 0)


def test_abandoned_gate_publishes_not_started(env: Env) -> None:
    launcher = env.launcher()
    request = env.request()
    with launcher.start(request) as proc:
        proc.abandon_gate()
        proc.abandon_gate()  # idempotent
        assert proc.wait(10) == WRAPPER_EXIT_NOT_STARTED
    receipt = launcher.store.read(request.attempt_id)
    assert receipt is not None
    assert receipt.outcome is ReceiptOutcome.NOT_STARTED
    assert receipt.handle == proc.handle
    assert not env.marker.exists()


def test_owner_death_before_the_gate_publishes_not_started(env: Env) -> None:
    request = env.request()
    argv = [sys.executable, "-c", OWNER, *owner_args(env, request)]
    owner = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert owner.stdout is not None
    wrapper_pid = int(owner.stdout.readline())
    owner.stdout.close()
    owner.kill()
    owner.wait(10)
    store = ReceiptStore(str(env.receipt_root))
    assert wait_until(lambda: os.path.exists(store.receipt_path(request.attempt_id)))
    receipt = store.read(request.attempt_id)
    assert receipt is not None
    assert receipt.outcome is ReceiptOutcome.NOT_STARTED
    assert receipt.handle.pid == wrapper_pid
    assert reap_child(wrapper_pid) == WRAPPER_EXIT_NOT_STARTED  # adopted: we are a subreaper
    assert not env.marker.exists()


def test_graceful_signal_before_the_gate_publishes_not_started(env: Env) -> None:
    launcher = env.launcher()
    request = env.request()
    with launcher.start(request) as proc:
        # The wrapper holds the attempt lock once its handlers are in place.
        assert wait_until(lambda: launcher.store.lock_held(request.attempt_id))
        assert proc.send_graceful(signal.SIGTERM) is True
        assert proc.wait(10) == WRAPPER_EXIT_NOT_STARTED
    receipt = launcher.store.read(request.attempt_id)
    assert receipt is not None
    assert receipt.outcome is ReceiptOutcome.NOT_STARTED
    assert not env.marker.exists()


def test_graceful_term_is_forwarded_to_the_whole_group(env: Env) -> None:
    launcher = env.launcher()
    request = env.request(argv=("sh", "-c", "sleep 300 & wait"))
    proc = launcher.start(request)
    try:
        proc.open_gate()
        assert wait_until(lambda: len(group_members(proc.handle.pgid)) >= 3)
        assert proc.send_graceful(signal.SIGTERM) is True
        assert proc.wait(10) == 128 + signal.SIGTERM
    finally:
        proc.close()
    assert group_gone(proc.handle.pgid)
    receipt = launcher.store.read(request.attempt_id)
    assert receipt is not None
    assert (receipt.outcome, receipt.signal) == (ReceiptOutcome.SIGNALED, signal.SIGTERM)


def _group_runs(pgid: int, program: bytes) -> bool:
    """True when a member of process group ``pgid`` has exec'd ``program`` (argv[0])."""
    for pid, _state in group_members(pgid):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == program:
                return True
        except OSError:
            continue
    return False


def test_each_graceful_signal_is_forwarded_once(env: Env) -> None:
    script = "trap 'echo got-term' TERM; sleep 300 & wait; wait; echo done"
    launcher = env.launcher()
    request = env.request(argv=("sh", "-c", script))
    with launcher.start(request) as proc:
        proc.open_gate()
        # the background child must have exec'd sleep: a forked shell that has not yet would
        # run the trap itself (the three members alone do not say so)
        assert wait_until(lambda: _group_runs(proc.handle.pgid, b"sleep"))
        assert proc.send_graceful(signal.SIGTERM) is True
        assert proc.wait(10) == 0, "the trap handled TERM, the group's sleep died of it"
    assert Path(request.output_path).read_text() == "got-term\ndone\n"
    receipt = launcher.store.read(request.attempt_id)
    assert receipt is not None
    assert (receipt.outcome, receipt.exit_code) == (ReceiptOutcome.EXITED, 0)


def test_kill_group_kills_every_member(env: Env) -> None:
    launcher = env.launcher()
    request = env.request(argv=("sh", "-c", "sleep 300 & sleep 301 & wait"))
    proc = launcher.start(request)
    try:
        proc.open_gate()
        assert wait_until(lambda: len(group_members(proc.handle.pgid)) >= 4)
        assert proc.kill_group() is True
        assert proc.wait(10) == -signal.SIGKILL
        assert proc.kill_group() is True, "the unreaped wrapper still pins its group"
    finally:
        proc.close()
    assert group_gone(proc.handle.pgid)
    assert launcher.store.read(request.attempt_id) is None


def test_attempt_lock_outlives_the_wrapper_while_an_escaped_process_lives(env: Env) -> None:
    pidfile = env.tmp / "escaped.pid"
    script = f"setsid sh -c 'echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; exec sleep 5' &"
    launcher = env.launcher()
    request = env.request(argv=("sh", "-c", script))
    with launcher.start(request) as proc:
        proc.open_gate()
        assert proc.wait(10) == 0
        assert wait_until(pidfile.exists)
    escaped = int(Path(pidfile).read_text())
    try:
        assert group_gone(proc.handle.pgid), "the escaped process left the group"
        assert launcher.store.lock_held(request.attempt_id) is True
    finally:
        kill_quietly(escaped)
    assert wait_until(lambda: not launcher.store.lock_held(request.attempt_id))
    reap_child(escaped, timeout=1.0)
