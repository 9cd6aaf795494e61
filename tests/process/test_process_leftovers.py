"""stop_leftovers on its own (issue 10 item 5): the lock port faked, the processes real."""

from __future__ import annotations

import os
import subprocess

import pytest

from qinglong.shared.process.leftovers import LeftoverReport, stop_leftovers


class FakeLock:
    """Our own AttemptLockPort: ``held`` until every pid in ``holders`` has exited."""

    def __init__(self, holders: list[int], *, stuck: bool = False) -> None:
        self._holders = holders
        self.stuck = stuck  # held whatever happens (holders in another PID namespace)

    def held(self) -> bool:
        return self.stuck or any(_running(pid) for pid in self._holders)

    def holders(self) -> list[int]:
        return [pid for pid in self._holders if _running(pid)]


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_nothing_left_behind_records_nothing() -> None:
    report = stop_leftovers(FakeLock([]), pgid=None, grace_s=5.0)
    assert report == LeftoverReport(grace_s=5.0) and report.event() is None


def test_a_holder_that_ignores_term_gets_term_then_kill_after_the_grace() -> None:
    holder = subprocess.Popen(
        ["sh", "-c", "trap 'echo term' TERM; echo ready; while :; do sleep 0.05; done"],
        stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        report = stop_leftovers(FakeLock([holder.pid]), pgid=None, grace_s=2.0)
        assert holder.wait(10) == -9
        assert holder.stdout.read().startswith(b"term\n")  # TERM came first
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert (report.found, report.killed, report.unresolved) == (1, 1, False)
    assert report.event() == ("leftovers_stopped", {
        "found": 1, "in_group": 0, "escaped": 1, "killed": 1, "grace_s": 2.0})


@pytest.mark.parametrize("holder", ["self", "init", "nobody"])
def test_a_held_lock_with_no_signallable_holder_is_unresolved_and_nobody_is_signalled(
    holder: str,
) -> None:
    """Holders that may never be signalled (this process, pid 1) or cannot be found at all
    leave the lock held: recorded as unresolved, never as done."""
    pids = {"self": [os.getpid()], "init": [1], "nobody": []}[holder]
    report = stop_leftovers(FakeLock(pids, stuck=True), pgid=None, grace_s=0.1)
    assert (report.found, report.killed, report.unresolved) == (0, 0, True)
    event = report.event()
    assert event is not None and event[0] == "leftovers_unresolved"
    assert event[1]["lock"] == "held"


def test_members_of_our_own_process_group_are_never_signalled() -> None:
    sibling = subprocess.Popen(["sleep", "60"])  # in this test process's own group
    try:
        report = stop_leftovers(FakeLock([sibling.pid], stuck=True), pgid=os.getpgrp(),
                                grace_s=0.1)
        assert sibling.poll() is None, "a process of our own group was signalled"
    finally:
        sibling.kill()
        sibling.wait()
    assert (report.found, report.unresolved) == (0, True)
