"""The signal guard (docs/protocols.md §3.2 step 6, §3.3): never signal a pid/pgid <= 1 or our own
group.

Refusal tests replace ``os.kill``, ``os.killpg`` and ``signal.pidfd_send_signal`` with
recorders, so a broken guard records a call instead of signalling the test runner (or, for
``kill(-1)``, every process it may signal).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import pytest

from qinglong.shared.errors import UnsafeSignalError
from qinglong.shared.process.signals import (
    GRACEFUL_SIGNALS,
    group_exists,
    signal_group,
    signal_process,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[object, ...]]]:
    """Record every signal the guard would send, and send none."""
    calls: list[tuple[str, tuple[object, ...]]] = []

    def recorder(name: str) -> Callable[..., None]:
        def record(*args: object) -> None:
            calls.append((name, args))

        return record

    monkeypatch.setattr(os, "kill", recorder("kill"))
    monkeypatch.setattr(os, "killpg", recorder("killpg"))
    monkeypatch.setattr(signal, "pidfd_send_signal", recorder("pidfd_send_signal"))
    return calls


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Make this process the reaper of orphaned descendants for the test's duration.

    PID 1 in a container may never reap orphans; as their subreaper we can wait for them and
    see exactly how they died.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    previous = ctypes.c_int(0)
    if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
        pytest.skip("prctl(PR_GET_CHILD_SUBREAPER) unavailable")
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        pytest.skip("prctl(PR_SET_CHILD_SUBREAPER) unavailable")
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, previous.value, 0, 0, 0)


def wait_child_status(pid: int, timeout: float = 5.0) -> int:
    """Reap ``pid`` (our child or orphan) and return its raw wait status."""
    deadline = time.monotonic() + timeout
    while True:
        reaped, status = os.waitpid(pid, os.WNOHANG)
        if reaped == pid:
            return status
        if time.monotonic() > deadline:
            pytest.fail(f"pid {pid} was not reaped in time")
        time.sleep(0.005)


UNSAFE_TARGETS = [0, 1, -1, -2, -os.getpid(), True, False]
UNSAFE_IDS = ["zero", "one", "minus-one", "minus-two", "minus-own-pid", "true", "false"]


# --- refusals: nothing is sent -----------------------------------------------------------------


@pytest.mark.parametrize("pgid", UNSAFE_TARGETS, ids=UNSAFE_IDS)
def test_signal_group_refuses_pgid_at_or_below_one_and_sends_nothing(
    pgid: int, sent: list[tuple[str, tuple[object, ...]]]
) -> None:
    with pytest.raises(UnsafeSignalError):
        signal_group(pgid, signal.SIGKILL)
    assert sent == []


@pytest.mark.parametrize("pid", UNSAFE_TARGETS, ids=UNSAFE_IDS)
def test_signal_process_refuses_pid_at_or_below_one_and_sends_nothing(
    pid: int, sent: list[tuple[str, tuple[object, ...]]]
) -> None:
    with pytest.raises(UnsafeSignalError):
        signal_process(pid, signal.SIGKILL)
    with pytest.raises(UnsafeSignalError):
        signal_process(pid, signal.SIGTERM, pidfd=999)
    assert sent == []


@pytest.mark.parametrize("pgid", UNSAFE_TARGETS, ids=UNSAFE_IDS)
def test_group_exists_refuses_pgid_at_or_below_one_and_sends_nothing(
    pgid: int, sent: list[tuple[str, tuple[object, ...]]]
) -> None:
    with pytest.raises(UnsafeSignalError):
        group_exists(pgid)
    assert sent == []


@pytest.mark.parametrize("pgid", ["1234", 1234.0, None], ids=["string", "float", "none"])
def test_non_integer_targets_are_refused(
    pgid: object, sent: list[tuple[str, tuple[object, ...]]]
) -> None:
    with pytest.raises(UnsafeSignalError):
        signal_group(pgid, signal.SIGTERM)  # type: ignore[arg-type]
    with pytest.raises(UnsafeSignalError):
        signal_process(pgid, signal.SIGTERM)  # type: ignore[arg-type]
    with pytest.raises(UnsafeSignalError):
        group_exists(pgid)  # type: ignore[arg-type]
    assert sent == []


def test_signal_group_refuses_the_callers_own_process_group(
    sent: list[tuple[str, tuple[object, ...]]],
) -> None:
    own = os.getpgrp()
    if own <= 1:
        pytest.skip("this runner's own group id is <= 1 (covered by the <= 1 refusals)")
    with pytest.raises(UnsafeSignalError, match="own process group"):
        signal_group(own, signal.SIGTERM)
    assert sent == []


def test_group_exists_refuses_the_callers_own_process_group(
    sent: list[tuple[str, tuple[object, ...]]],
) -> None:
    own = os.getpgrp()
    if own <= 1:
        pytest.skip("this runner's own group id is <= 1 (covered by the <= 1 refusals)")
    with pytest.raises(UnsafeSignalError):
        group_exists(own)
    assert sent == []


def test_a_safe_target_is_passed_through_unchanged(
    sent: list[tuple[str, tuple[object, ...]]],
) -> None:
    """Guards the recorder itself: an allowed call does reach the (recorded) syscall."""
    assert signal_group(4_000_000, signal.SIGTERM) is True
    assert signal_process(4_000_000, signal.SIGHUP) is True
    assert signal_process(4_000_000, signal.SIGINT, pidfd=7) is True
    assert sent == [
        ("killpg", (4_000_000, signal.SIGTERM)),
        ("kill", (4_000_000, signal.SIGHUP)),
        ("pidfd_send_signal", (7, signal.SIGINT)),
    ]


def test_graceful_signals_are_term_int_hup() -> None:
    assert frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP}) == GRACEFUL_SIGNALS
    assert signal.SIGKILL not in GRACEFUL_SIGNALS


# --- real process groups ---------------------------------------------------------------------


def test_signal_group_kills_every_process_of_a_setsid_group(subreaper: None) -> None:
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 300 & echo $!; wait"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert leader.stdout is not None
    try:
        grandchild = int(leader.stdout.readline())
        pgid = os.getpgid(leader.pid)
        assert pgid == leader.pid != os.getpgrp()
        assert os.getpgid(grandchild) == pgid
        assert group_exists(pgid)

        assert signal_group(pgid, signal.SIGKILL) is True

        assert leader.wait(timeout=5) == -signal.SIGKILL
        # The orphaned sleep was re-parented to us (subreaper): reap it and see how it died.
        status = wait_child_status(grandchild)
        assert os.WIFSIGNALED(status)
        assert os.WTERMSIG(status) == signal.SIGKILL
        assert not group_exists(pgid)
    finally:
        leader.stdout.close()
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
            leader.wait()


def test_signal_group_returns_false_for_a_vanished_group() -> None:
    child = subprocess.Popen(["true"], start_new_session=True)
    child.wait()
    assert not group_exists(child.pid)
    assert signal_group(child.pid, signal.SIGTERM) is False
    assert signal_group(child.pid, signal.SIGKILL) is False


def test_group_exists_counts_an_unreaped_zombie_leader() -> None:
    child = subprocess.Popen(["true"], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while True:
            with open(f"/proc/{child.pid}/stat", encoding="utf-8") as fh:
                if fh.read().rpartition(")")[2].split()[0] == "Z":
                    break
            assert time.monotonic() < deadline, "child never became a zombie"
            time.sleep(0.005)
        assert group_exists(child.pid)
    finally:
        child.wait()
    assert not group_exists(child.pid)


def test_signal_process_through_pidfd_terminates_that_process() -> None:
    child = subprocess.Popen(["sleep", "300"])
    pidfd = os.pidfd_open(child.pid)
    try:
        assert signal_process(child.pid, signal.SIGTERM, pidfd=pidfd) is True
        assert child.wait(timeout=5) == -signal.SIGTERM
        # The process is gone (and reaped): the same pidfd now reports it as gone.
        assert signal_process(child.pid, signal.SIGTERM, pidfd=pidfd) is False
    finally:
        os.close(pidfd)
        if child.poll() is None:
            child.kill()
            child.wait()


def test_signal_process_by_pid_terminates_only_that_process() -> None:
    child = subprocess.Popen(["sleep", "300"])
    try:
        assert signal_process(child.pid, signal.SIGKILL) is True
        assert child.wait(timeout=5) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert signal_process(child.pid, signal.SIGKILL) is False
