"""The receipt-first reconciler on real processes and files (docs/protocols.md §3.4, issue 3)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from recovery_kit import Kit, handle_of

from qinglong.shared.errors import LocalApplicationStartupRecoveryRequiredError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.statuses import RunStatus

pytestmark = pytest.mark.integration


def test_a_trusted_receipt_settles_the_run_then_the_file_and_the_journal_go(kit: Kit) -> None:
    gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
    run, attempt = kit.left_running(gone)
    path = kit.write_receipt(run, attempt, gone, code=3)
    result = kit.reconciler.reconcile()
    assert result.safe and result.settled_from_receipt == 1
    final = kit.repo.get_run(run.id)
    assert (final.status, final.exit_code) == (RunStatus.FAILED, 3)
    assert not path.exists()
    assert kit.repo.journal_rows() == []


def test_pid_reuse_is_not_mistaken_for_the_wrapper_and_the_foreign_process_survives(
    kit: Kit,
) -> None:
    foreign = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        real = handle_of(foreign.pid)
        reused = ProcessHandle(real.boot_id, real.pid, real.pgid, real.start_ticks + 12345)
        run, _ = kit.left_running(reused)
        result = kit.reconciler.reconcile()
        assert result.safe and result.lost == 1
        assert kit.repo.get_run(run.id).status is RunStatus.LOST
        assert foreign.poll() is None, "the unrelated process was touched"
    finally:
        foreign.kill()
        foreign.wait()


def test_a_handle_from_another_boot_is_lost_even_if_the_pid_lives(kit: Kit) -> None:
    foreign = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        real = handle_of(foreign.pid)
        other_boot = "00000000-0000-4000-8000-000000000001"
        assert other_boot != real.boot_id
        run, _ = kit.left_running(ProcessHandle(other_boot, real.pid, real.pgid,
                                                real.start_ticks))
        assert kit.reconciler.reconcile().lost == 1
        assert kit.repo.get_run(run.id).status is RunStatus.LOST
        assert foreign.poll() is None
    finally:
        foreign.kill()
        foreign.wait()


def test_a_zombie_wrapper_without_receipt_is_lost_never_given_an_exit_code(kit: Kit) -> None:
    child = subprocess.Popen(["sleep", "0.2"], start_new_session=True)
    handle = handle_of(child.pid)
    deadline = time.monotonic() + 5
    stat = Path(f"/proc/{child.pid}/stat")
    while stat.read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    try:
        run, _ = kit.left_running(handle)
        assert kit.reconciler.reconcile().lost == 1
        final = kit.repo.get_run(run.id)
        assert (final.status, final.exit_code) == (RunStatus.LOST, None)
    finally:
        child.wait()


def test_the_same_live_process_is_kept_running_for_re_attachment(kit: Kit) -> None:
    run, attempt = kit.left_running(None, starting=True)
    live = _hold_lock(kit, attempt.id, as_wrapper=True)  # this attempt's live wrapper
    try:
        attempt = kit.repo.save_handle(attempt, handle_of(live.pid).encode())
        result = kit.reconciler.reconcile()
        assert result.safe
        assert [(r.id, a.id) for r, _, a in result.reattach] == [(run.id, attempt.id)]
        assert kit.repo.get_run(run.id).status is RunStatus.RUNNING
    finally:
        live.kill()
        live.wait()


def test_an_invalid_receipt_is_quarantined_with_its_intent_persisted_first(kit: Kit) -> None:
    gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
    run, attempt = kit.left_running(gone)
    path = kit.write_receipt(run, attempt, gone, raw=b"{not json")
    result = kit.reconciler.reconcile()
    assert result.quarantined == 1 and result.lost == 1
    assert not path.exists()
    moved = os.path.join(kit.receipts.root, "quarantine", attempt.id + ".receipt")
    assert Path(moved).read_bytes() == b"{not json"
    [(attempt_id, state, _)] = kit.repo.journal_rows()
    assert (attempt_id, state) == (attempt.id, "quarantined")


def test_a_receipt_naming_another_process_is_quarantined_not_trusted(kit: Kit) -> None:
    gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
    other = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_001, 4_000_001, 2)
    run, attempt = kit.left_running(gone)
    kit.write_receipt(run, attempt, other, code=0)
    result = kit.reconciler.reconcile()
    assert result.quarantined == 1
    assert kit.repo.get_run(run.id).status is RunStatus.LOST  # never "succeeded"


def test_a_start_intent_without_handle_and_a_free_lock_is_lost_as_never_started(
    kit: Kit,
) -> None:
    run, _ = kit.left_running(None, starting=True)
    assert kit.reconciler.reconcile().lost == 1
    assert kit.repo.get_run(run.id).status is RunStatus.LOST


def test_a_held_attempt_lock_is_insufficient_evidence_and_refuses_startup(kit: Kit) -> None:
    run, attempt = kit.left_running(None, starting=True)
    fd = os.open(kit.receipts.lock_path(attempt.id), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    holder = subprocess.Popen(["sleep", "60"], pass_fds=(fd,))
    os.close(fd)
    try:
        result = kit.reconciler.reconcile()
        assert result.insufficient == 1 and not result.safe
        with pytest.raises(LocalApplicationStartupRecoveryRequiredError) as err:
            kit.reconciler.require_safe(result)
        assert run.id not in str(err.value)
        assert kit.repo.get_run(run.id).status is RunStatus.DISPATCHING
    finally:
        holder.kill()
        holder.wait()


def test_257_candidates_refuse_with_truncated_having_looked_at_256_only(kit: Kit) -> None:
    gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
    runs = [kit.left_running(gone)[0].id for _ in range(257)]
    result = kit.reconciler.reconcile()
    assert result.truncated and result.candidates == 256 and result.lost == 256
    with pytest.raises(LocalApplicationStartupRecoveryRequiredError) as err:
        kit.reconciler.require_safe(result)
    assert err.value.truncated
    untouched = [r for r in runs if kit.repo.get_run(r).status is RunStatus.RUNNING]
    assert untouched == [max(runs)]


def test_a_lost_attempt_retries_when_the_task_allows(kit: Kit) -> None:
    from qinglong.shared.domain import Task
    from qinglong.shared.ids import uuid7

    task = kit.repo.create_task(Task(id=uuid7(), name="retry", argv=("true",),
                                     schedule="@once", max_attempts=2))
    gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
    run, _ = kit.left_running(gone, task=task)
    kit.reconciler.reconcile()
    assert kit.repo.get_run(run.id).status is RunStatus.QUEUED


def _locked(kit: Kit, attempt_id: str) -> int:
    """Create the attempt's lock file as the wrapper does and take the lock: the fd."""
    fd = os.open(kit.receipts.lock_path(attempt_id), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_receipt_with_an_escaped_holder_of_the_lock_settles_then_stops_and_records_it(
    kit: Kit,
) -> None:
    """Issue 10 item 5: the wrapper published and exited, a process that left its group
    (here a setsid sleep holding the lock fd) lives on: settle from the receipt, then TERM
    it, record leftovers_stopped, and only then resolve the journal row."""
    kit.reconciler.grace_s = 1.0
    gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
    run, attempt = kit.left_running(gone)
    kit.write_receipt(run, attempt, gone, code=0)
    fd = _locked(kit, attempt.id)
    daemon = subprocess.Popen(["sleep", "60"], pass_fds=(fd,), start_new_session=True)
    os.close(fd)  # only the daemon holds the lock now
    try:
        result = kit.reconciler.reconcile()
        assert result.safe and result.settled_from_receipt == 1
        assert result.leftovers_stopped == 1
        assert daemon.wait(10) == -15  # TERM, within the grace
    finally:
        daemon.kill()
        daemon.wait()
    final = kit.repo.get_run(run.id)
    assert (final.status, final.exit_code) == (RunStatus.SUCCEEDED, 0)
    [event] = [e for e in kit.repo.list_events(run.id) if e.kind.startswith("leftovers_")]
    assert event.kind == "leftovers_stopped" and '"found": 1' in (event.detail or "")
    assert kit.repo.journal_rows() == []
    assert not Path(kit.receipts.lock_path(attempt.id)).exists()


def test_a_receipt_with_a_lock_held_by_no_findable_process_is_recorded_unresolved(
    kit: Kit,
) -> None:
    """The lock is held by this test process, which the /proc scan never reports (as if the
    holder lived in another PID namespace): the run still settles from its receipt, the
    leftovers are recorded as unresolved, and the journal row stays."""
    kit.reconciler.grace_s = 0.2
    gone = ProcessHandle("00000000-0000-4000-8000-000000000000", 4_000_000, 4_000_000, 1)
    run, attempt = kit.left_running(gone)
    kit.write_receipt(run, attempt, gone, code=0)
    fd = _locked(kit, attempt.id)
    try:
        result = kit.reconciler.reconcile()
    finally:
        os.close(fd)
    assert result.safe and result.leftovers_unresolved == 1
    assert kit.repo.get_run(run.id).status is RunStatus.SUCCEEDED
    kinds = [e.kind for e in kit.repo.list_events(run.id)]
    assert "leftovers_unresolved" in kinds
    assert kit.repo.unresolved_leftover_runs() == [(run.id, attempt.id)]
    assert [row[0] for row in kit.repo.journal_rows()] == [attempt.id]


def _hold_lock(kit: Kit, attempt_id: str, *, as_wrapper: bool = False
               ) -> subprocess.Popen[bytes]:
    """A process that holds the attempt's lock, as the wrapper and its command do; with
    ``as_wrapper`` it carries the wrapper's launch environment for ``attempt_id``."""
    fd = os.open(kit.receipts.lock_path(attempt_id), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    env = {**os.environ, "QL3_LAUNCH_ATTEMPT_ID": attempt_id} if as_wrapper else None
    holder = subprocess.Popen(["sleep", "60"], pass_fds=(fd,), start_new_session=True,
                              env=env)
    os.close(fd)
    return holder


@pytest.mark.parametrize("lock", ["free", "held_by_another"])
def test_a_handle_naming_a_live_process_that_is_not_the_wrapper_is_never_reattached(
    kit: Kit, lock: str
) -> None:
    """From a fresh user's trial: a well-formed handle copied from another process (a
    corrupted or copied row) was re-attached, and at the timeout that unrelated process got
    TERM. That process was not started as this attempt's wrapper: refuse."""
    bystander = subprocess.Popen(["sh", "-c", "trap 'echo term' TERM; sleep 60 & wait"],
                                 stdout=subprocess.PIPE, start_new_session=True)
    run, attempt = kit.left_running(handle_of(bystander.pid))
    holder = _hold_lock(kit, attempt.id) if lock == "held_by_another" else None
    try:
        result = kit.reconciler.reconcile()
        assert result.reattach == [] and result.insufficient == 1 and not result.safe
        assert kit.repo.get_run(run.id).status is RunStatus.RUNNING
        assert bystander.poll() is None  # never signalled
    finally:
        for proc in (bystander, holder):
            if proc is not None:
                os.killpg(proc.pid, signal.SIGKILL)  # each leads its own session
                proc.wait()
        assert bystander.stdout is not None
        assert bystander.stdout.read() == b""  # it never saw TERM
        bystander.stdout.close()


def test_a_wrapper_still_starting_before_it_takes_its_lock_is_reattached(kit: Kit) -> None:
    """From review: a wrapper between its spawn and taking its lock holds no lock yet; it is
    this attempt's wrapper all the same (its launch environment says so)."""
    _run, attempt = kit.left_running(None, starting=True)
    env = {**os.environ, "QL3_LAUNCH_ATTEMPT_ID": attempt.id}
    starting = subprocess.Popen(["sleep", "60"], env=env, start_new_session=True)
    try:
        kit.repo.save_handle(attempt, handle_of(starting.pid).encode())
        result = kit.reconciler.reconcile()
        assert result.safe and [a.id for _, _, a in result.reattach] == [attempt.id]
    finally:
        starting.kill()
        starting.wait()
