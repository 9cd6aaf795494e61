"""Linux process identity: /proc stat, handle capture, liveness probe (docs/protocols.md §3.2,
§3.4).

These run against the real /proc of this machine: the current process, short-lived children,
and a real zombie (a child that exited and is not yet reaped).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from qinglong.shared.errors import ProcessIdentityError
from qinglong.shared.handles import PID_MAX, ProcessHandle
from qinglong.shared.process.identity import (
    BOOT_ID_PATH,
    Liveness,
    ProcStat,
    capture_handle,
    parse_stat,
    pid_exists,
    probe_handle,
    read_boot_id,
    read_stat,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc only")

BOOT_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# Fields 3.. of a real stat line (state S, ppid 1, pgrp 77, ..., field 22 starttime 9876543).
_TAIL_FIELDS = (
    "S 1 77 77 0 -1 4194560 1000 0 0 0 12 3 0 0 20 0 1 0 9876543 10000000 500 "
    "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0"
)


def stat_line(pid: int, comm: str, tail: str = _TAIL_FIELDS) -> str:
    return f"{pid} ({comm}) {tail}\n"


def wait_for_state(pid: int, state: str, timeout: float = 5.0) -> ProcStat:
    deadline = time.monotonic() + timeout
    while True:
        stat = read_stat(pid)
        if stat is not None and stat.state == state:
            return stat
        if time.monotonic() > deadline:
            pytest.fail(f"pid {pid} did not reach state {state!r} (last: {stat})")
        time.sleep(0.005)


def vanished_pid() -> int:
    """The pid of a child that has exited and been reaped (so no /proc entry remains)."""
    child = subprocess.Popen(["true"])
    child.wait()
    assert not pid_exists(child.pid)
    return child.pid


@pytest.fixture
def zombie() -> Iterator[subprocess.Popen[bytes]]:
    """A real zombie: a child that exited; we keep it unreaped until the test ends."""
    child = subprocess.Popen(["true"])
    try:
        wait_for_state(child.pid, "Z")
        yield child
    finally:
        child.wait()


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "30"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


# --- parse_stat ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "comm",
    [
        "sleep",
        "with space",
        "a) b",
        ") S 1 2 3",
        "x) (y) z)",
        "((",
        ")",
        "",
        "tab\there",
        "new\nline",
    ],
)
def test_parse_stat_reads_fields_after_the_last_paren(comm: str) -> None:
    stat = parse_stat(stat_line(4321, comm))
    assert stat == ProcStat(pid=4321, state="S", ppid=1, pgid=77, start_ticks=9876543)


def test_parse_stat_reads_zombie_state_and_field_22() -> None:
    tail = _TAIL_FIELDS.replace("S 1 77", "Z 12 34", 1).replace("9876543", "42", 1)
    stat = parse_stat(stat_line(99, "defunct) Z 1 1", tail))
    assert (stat.state, stat.ppid, stat.pgid, stat.start_ticks) == ("Z", 12, 34, 42)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1234 sleep S 1 1 1",
        "1234 (sleep) S 1 1",
        "abc (sleep) " + _TAIL_FIELDS,
        "1234 (sleep) S x 77 " + _TAIL_FIELDS[7:],
        "1234 (sleep) " + _TAIL_FIELDS.replace("9876543", "soon", 1),
        "(sleep) " + _TAIL_FIELDS,
    ],
    ids=[
        "empty",
        "no parens",
        "too few fields",
        "pid not a number",
        "ppid not a number",
        "start ticks not a number",
        "no pid",
    ],
)
def test_parse_stat_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ProcessIdentityError):
        parse_stat(text)


# --- reading the live system ----------------------------------------------------------------


def test_read_boot_id_is_this_machines_lowercase_uuid() -> None:
    boot_id = read_boot_id()
    assert BOOT_RE.fullmatch(boot_id)
    with open(BOOT_ID_PATH, encoding="ascii") as fh:
        assert fh.read().strip() == boot_id


def test_read_stat_of_current_process_matches_os() -> None:
    stat = read_stat(os.getpid())
    assert stat is not None
    assert stat.pid == os.getpid()
    assert stat.ppid == os.getppid()
    assert stat.pgid == os.getpgrp()
    assert stat.state in {"R", "S"}
    assert stat.start_ticks > 0


def test_read_stat_start_ticks_is_stable_for_one_process() -> None:
    first = read_stat(os.getpid())
    second = read_stat(os.getpid())
    assert first is not None
    assert second is not None
    assert first.start_ticks == second.start_ticks


def test_read_stat_of_a_child_with_parens_and_spaces_in_its_name() -> None:
    name = "a) b (c) d)"
    code = (
        "import sys, time\n"
        "open('/proc/self/comm', 'w').write(sys.argv[1])\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        with open(f"/proc/{child.pid}/comm", encoding="utf-8") as fh:
            assert fh.read().rstrip("\n") == name
        stat = read_stat(child.pid)
        assert stat is not None
        assert stat.pid == child.pid
        assert stat.ppid == os.getpid()
        assert stat.pgid == os.getpgrp()
        assert stat.state in {"R", "S"}
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


def test_read_stat_of_a_missing_pid_is_none() -> None:
    assert read_stat(vanished_pid()) is None


@pytest.mark.parametrize("pid", [0, -1, -os.getpid()], ids=["zero", "minus-one", "minus-own"])
def test_read_stat_of_non_positive_pid_is_none(pid: int) -> None:
    assert read_stat(pid) is None


def test_pid_exists_counts_zombies_but_not_reaped_processes(
    zombie: subprocess.Popen[bytes],
) -> None:
    assert pid_exists(os.getpid())
    assert pid_exists(zombie.pid)
    assert not pid_exists(vanished_pid())
    assert not pid_exists(0)
    assert not pid_exists(-1)


# --- capture_handle --------------------------------------------------------------------------


def test_capture_handle_of_current_process_names_this_incarnation() -> None:
    handle = capture_handle(os.getpid())
    stat = read_stat(os.getpid())
    assert stat is not None
    assert handle == ProcessHandle(read_boot_id(), os.getpid(), os.getpgrp(), stat.start_ticks)
    assert ProcessHandle.decode(handle.encode()) == handle


def test_capture_handle_of_new_session_child_has_pgid_equal_pid() -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        handle = capture_handle(child.pid)
        assert handle.pid == handle.pgid == child.pid
    finally:
        child.kill()
        child.wait()


def test_capture_handle_refuses_a_zombie(zombie: subprocess.Popen[bytes]) -> None:
    with pytest.raises(ProcessIdentityError):
        capture_handle(zombie.pid)


def test_capture_handle_refuses_a_missing_process() -> None:
    with pytest.raises(ProcessIdentityError):
        capture_handle(vanished_pid())


# --- probe_handle (docs/protocols.md §3.4 step 3) -------------------------------------------------


def other_boot_id(boot_id: str) -> str:
    flipped = "0" if boot_id[0] != "0" else "1"
    return flipped + boot_id[1:]


def test_probe_current_process_is_alive() -> None:
    assert probe_handle(capture_handle(os.getpid())) == Liveness.ALIVE == "alive"


def test_probe_live_child_is_alive_with_explicit_boot_id(
    sleeper: subprocess.Popen[bytes],
) -> None:
    handle = capture_handle(sleeper.pid)
    assert probe_handle(handle, boot_id=read_boot_id()) == "alive"


def test_probe_handle_from_another_boot_is_gone() -> None:
    handle = capture_handle(os.getpid())
    other = ProcessHandle(
        other_boot_id(handle.boot_id), handle.pid, handle.pgid, handle.start_ticks
    )
    assert probe_handle(other) == Liveness.GONE == "gone"


def test_probe_with_a_different_current_boot_id_is_gone() -> None:
    handle = capture_handle(os.getpid())
    assert probe_handle(handle, boot_id=other_boot_id(handle.boot_id)) == "gone"


def test_probe_handle_of_missing_pid_is_gone() -> None:
    pid = vanished_pid()
    assert probe_handle(ProcessHandle(read_boot_id(), pid, pid, 12345)) == "gone"


def test_probe_handle_of_pid_above_kernel_pid_max_is_gone() -> None:
    with open("/proc/sys/kernel/pid_max", encoding="ascii") as fh:
        pid_max = int(fh.read())
    if pid_max >= PID_MAX:
        pytest.skip("kernel pid_max is already the largest pid a handle may name")
    handle = ProcessHandle(read_boot_id(), PID_MAX, PID_MAX, 1)
    assert probe_handle(handle) == "gone"


@pytest.mark.parametrize("delta", [1, -1])
def test_probe_this_process_with_other_start_ticks_is_gone(delta: int) -> None:
    """A reused pid: same boot and pid, different start time -> not our process."""
    handle = capture_handle(os.getpid())
    reused = ProcessHandle(handle.boot_id, handle.pid, handle.pgid, handle.start_ticks + delta)
    assert probe_handle(reused) == "gone"


def test_probe_real_zombie_is_zombie(zombie: subprocess.Popen[bytes]) -> None:
    stat = read_stat(zombie.pid)
    assert stat is not None
    assert stat.state == "Z"
    handle = ProcessHandle(read_boot_id(), zombie.pid, stat.pgid, stat.start_ticks)
    assert probe_handle(handle) == Liveness.ZOMBIE == "zombie"


def test_probe_zombie_with_other_start_ticks_is_gone(zombie: subprocess.Popen[bytes]) -> None:
    stat = read_stat(zombie.pid)
    assert stat is not None
    handle = ProcessHandle(read_boot_id(), zombie.pid, stat.pgid, stat.start_ticks + 1)
    assert probe_handle(handle) == "gone"


def test_probe_of_a_reaped_zombie_is_gone() -> None:
    child = subprocess.Popen(["true"])
    try:
        stat = wait_for_state(child.pid, "Z")
        handle = ProcessHandle(read_boot_id(), child.pid, stat.pgid, stat.start_ticks)
        assert probe_handle(handle) == "zombie"
    finally:
        child.wait()
    assert probe_handle(handle) == "gone"


def test_probe_of_a_killed_child_goes_alive_then_gone(
    sleeper: subprocess.Popen[bytes],
) -> None:
    handle = capture_handle(sleeper.pid)
    assert probe_handle(handle) == "alive"
    sleeper.kill()
    sleeper.wait()
    assert probe_handle(handle) == "gone"


def test_probe_handle_reports_a_process_that_left_its_group_as_regrouped() -> None:
    from qinglong.shared.handles import ProcessHandle
    from qinglong.shared.process.identity import Liveness, probe_handle, read_boot_id, read_stat

    me = read_stat(os.getpid())
    assert me is not None
    other_group = 4_000_000 if me.pgid != 4_000_000 else 3_999_999
    handle = ProcessHandle(read_boot_id(), os.getpid(), other_group, me.start_ticks)
    assert probe_handle(handle) == Liveness.REGROUPED
