"""Manual resolution of a run whose stored handle is corrupt, and the evidence view of
unreadable receipt shards (issue 10 item 7, case C20), on a real repository and real files,
locks and processes."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from recovery_kit import Kit, handle_of

from qinglong.local.recovery.evidence import attempt_evidence
from qinglong.local.recovery.manual import resolve_run
from qinglong.shared import errors
from qinglong.shared.domain import Attempt, Run
from qinglong.shared.handles import PID_MAX
from qinglong.shared.process.identity import read_boot_id
from qinglong.shared.statuses import AttemptStatus, RunStatus


@pytest.fixture
def sentinel() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of ours that no resolution may ever signal."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def corrupt(kit: Kit, attempt: Attempt, handle: str | None) -> None:
    """Overwrite the stored handle as a field corruption of the row would."""
    kit.db.write(lambda conn: conn.execute(
        "UPDATE attempts SET handle = ? WHERE id = ?", (handle, attempt.id)))


def take_lock(kit: Kit, attempt: Attempt) -> int:
    fd = os.open(kit.receipts.lock_path(attempt.id), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


def free_lock(kit: Kit, attempt: Attempt) -> None:
    os.close(os.open(kit.receipts.lock_path(attempt.id), os.O_RDWR | os.O_CREAT, 0o600))


def left_with_corrupt_handle(kit: Kit, sentinel: subprocess.Popen[bytes],
                             form: str) -> tuple[Run, Attempt]:
    valid = handle_of(sentinel.pid)
    run, attempt = kit.left_running(valid)
    boot, pid, ticks = read_boot_id(), sentinel.pid, valid.start_ticks
    corrupt(kit, attempt, form.format(boot=boot, pid=pid, ticks=ticks, huge=PID_MAX + 1))
    return run, attempt


CORRUPT_FORMS = {
    "pgid_1": "ql3lp1:{boot}:{pid}:1:{ticks}",
    "pgid_0": "ql3lp1:{boot}:{pid}:0:{ticks}",
    "pid_0": "ql3lp1:{boot}:0:{pid}:{ticks}",
    "pid_negative": "ql3lp1:{boot}:-{pid}:{pid}:{ticks}",
    "pid_huge": "ql3lp1:{boot}:{huge}:{huge}:{ticks}",
    "garbage": "not a handle at all",
}


def attempt_events(kit: Kit, run: Run) -> list[dict[str, object]]:
    return [json.loads(e.detail or "{}") for e in kit.repo.list_events(run.id)
            if e.kind.startswith("attempt_")]


@pytest.mark.parametrize("form", sorted(CORRUPT_FORMS))
def test_resolve_settles_a_corrupt_handle_once_the_attempt_lock_is_free_and_signals_nothing(
    kit: Kit, sentinel: subprocess.Popen[bytes], form: str
) -> None:
    run, attempt = left_with_corrupt_handle(kit, sentinel, CORRUPT_FORMS[form])
    free_lock(kit, attempt)
    done = resolve_run(kit.repo, kit.receipts, run.id, "lost")
    assert (done.status, done.source) == ("lost", "operator")
    assert kit.repo.get_run(run.id).status is RunStatus.LOST
    assert kit.repo.get_attempt(attempt.id).status is AttemptStatus.LOST
    detail = attempt_events(kit, run)[-1]
    assert (detail["handle"], detail["lock"]) == ("corrupt", "free")
    assert sentinel.poll() is None, "the pid in the corrupt handle was never signalled"


def test_resolve_refuses_a_corrupt_handle_while_a_process_holds_the_attempt_lock(
    kit: Kit, sentinel: subprocess.Popen[bytes]
) -> None:
    run, attempt = left_with_corrupt_handle(kit, sentinel, CORRUPT_FORMS["pgid_1"])
    fd = take_lock(kit, attempt)
    holder = subprocess.Popen(["sleep", "120"], pass_fds=(fd,))  # holds the lock too
    os.close(fd)
    try:
        with pytest.raises(errors.AttemptLockHeldError) as info:
            resolve_run(kit.repo, kit.receipts, run.id, "failed")
        assert info.value.holders == [holder.pid]
        assert "holds its attempt lock (1 holder(s)" in str(info.value)
        assert kit.repo.get_run(run.id).status is RunStatus.RUNNING
        assert holder.poll() is None and sentinel.poll() is None, "nothing was signalled"
    finally:
        holder.kill()
        holder.wait()
    done = resolve_run(kit.repo, kit.receipts, run.id, "failed")
    assert done.status == "failed"


def test_resolve_counts_a_missing_lock_file_as_free_and_records_it(
    kit: Kit, sentinel: subprocess.Popen[bytes]
) -> None:
    run, attempt = left_with_corrupt_handle(kit, sentinel, CORRUPT_FORMS["pid_huge"])
    assert not os.path.exists(kit.receipts.lock_path(attempt.id))
    assert resolve_run(kit.repo, kit.receipts, run.id, "lost").status == "lost"
    detail = attempt_events(kit, run)[-1]
    assert (detail["handle"], detail["lock"]) == ("corrupt", "missing")


def test_a_trusted_receipt_still_wins_over_a_corrupt_handle(
    kit: Kit, sentinel: subprocess.Popen[bytes]
) -> None:
    valid = handle_of(sentinel.pid)
    run, attempt = kit.left_running(valid)
    kit.write_receipt(run, attempt, valid, code=3)
    corrupt(kit, attempt, f"ql3lp1:{read_boot_id()}:{sentinel.pid}:1:{valid.start_ticks}")
    done = resolve_run(kit.repo, kit.receipts, run.id, "lost")
    assert (done.status, done.source) == ("failed", "receipt")
    assert kit.repo.get_run(run.id).exit_code == 3


def test_resolve_refuses_with_the_reason_when_the_receipt_shard_is_a_symlink(
    kit: Kit, sentinel: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    run, attempt = left_with_corrupt_handle(kit, sentinel, CORRUPT_FORMS["pgid_1"])
    shard = kit.receipts.shard_path(attempt.id)
    os.rmdir(shard)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", shard)
    with pytest.raises(errors.EvidenceUnreadableError) as info:
        resolve_run(kit.repo, kit.receipts, run.id, "lost")
    assert info.value.reason == "unsafe_path"
    assert str(tmp_path) not in str(info.value)
    assert kit.repo.get_run(run.id).status is RunStatus.RUNNING
    os.unlink(shard)  # the operator repairs the receipt directory, then resolves
    assert resolve_run(kit.repo, kit.receipts, run.id, "lost").status == "lost"


def test_evidence_names_a_corrupt_handle_and_never_probes_it(
    kit: Kit, sentinel: subprocess.Popen[bytes]
) -> None:
    _, attempt = left_with_corrupt_handle(kit, sentinel, CORRUPT_FORMS["pgid_0"])
    evidence = attempt_evidence(kit.receipts, kit.repo.get_attempt(attempt.id))
    assert (evidence["process"], evidence["receipt"], evidence["lock"]) == (
        "corrupt_handle", "none", "missing")


def test_evidence_reports_a_symlinked_shard_as_unreadable_without_raising(
    kit: Kit, sentinel: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    _, attempt = kit.left_running(handle_of(sentinel.pid))
    shard = kit.receipts.shard_path(attempt.id)
    os.rmdir(shard)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", shard)
    evidence = attempt_evidence(kit.receipts, kit.repo.get_attempt(attempt.id))
    assert (evidence["receipt"], evidence["receipt_unreadable"]) == ("unreadable", "unsafe_path")
    assert (evidence["lock"], evidence["lock_unreadable"]) == ("unreadable", "unsafe_path")
    assert str(tmp_path) not in json.dumps(evidence)


def test_evidence_reports_a_receipt_that_is_a_directory_as_unreadable(
    kit: Kit, sentinel: subprocess.Popen[bytes]
) -> None:
    _, attempt = kit.left_running(handle_of(sentinel.pid))
    os.mkdir(kit.receipts.receipt_path(attempt.id))
    evidence = attempt_evidence(kit.receipts, kit.repo.get_attempt(attempt.id))
    assert (evidence["receipt"], evidence["receipt_unreadable"]) == ("unreadable", "not_a_file")
    assert evidence["process"] == "not_the_wrapper"  # the sentinel is no wrapper of ours


def test_evidence_names_a_live_process_that_is_not_the_attempts_wrapper(
    kit: Kit, sentinel: subprocess.Popen[bytes]
) -> None:
    """From a verification through ql3: a copied handle showed as "process alive", which is
    true of the process it names, not of the attempt's wrapper."""
    _, attempt = kit.left_running(handle_of(sentinel.pid))
    evidence = attempt_evidence(kit.receipts, kit.repo.get_attempt(attempt.id))
    assert evidence["process"] == "not_the_wrapper"
    assert sentinel.poll() is None


def test_a_start_intent_without_a_handle_is_decided_by_the_attempt_lock_alone(
    kit: Kit,
) -> None:
    run, attempt = kit.left_running(None, starting=True)
    fd = take_lock(kit, attempt)
    try:
        with pytest.raises(errors.ConflictError):
            resolve_run(kit.repo, kit.receipts, run.id, "lost")
        assert kit.repo.get_run(run.id).status in (RunStatus.DISPATCHING, RunStatus.RUNNING)
    finally:
        os.close(fd)
    assert resolve_run(kit.repo, kit.receipts, run.id, "lost").status == "lost"


def test_resolve_settles_a_handle_whose_live_process_does_not_hold_the_free_lock(
    kit: Kit, sentinel: subprocess.Popen[bytes]
) -> None:
    """A well-formed handle naming a live process that is not the attempt's wrapper (a
    copied row): a live wrapper holds its lock, so a free lock decides; before, resolve
    refused for as long as that unrelated process lived (a dead end)."""
    run, attempt = kit.left_running(handle_of(sentinel.pid))
    free_lock(kit, attempt)
    done = resolve_run(kit.repo, kit.receipts, run.id, "lost")
    assert (done.status, done.source) == ("lost", "operator")
    [settled] = kit.repo.get_run(run.id).attempts
    assert settled.status is AttemptStatus.LOST
    details = [json.loads(e.detail or "{}") for e in kit.repo.list_events(run.id)
               if e.attempt_id == attempt.id and e.to_status == "lost"]
    assert details and details[0]["handle"] == "not_the_wrapper"
    assert sentinel.poll() is None  # never signalled


def test_resolve_refuses_while_the_attempts_own_wrapper_runs(kit: Kit) -> None:
    run, attempt = kit.left_running(None, starting=True)
    fd = take_lock(kit, attempt)
    holder = subprocess.Popen(["sleep", "60"], pass_fds=(fd,),
                              env={**os.environ, "QL3_LAUNCH_ATTEMPT_ID": attempt.id})
    os.close(fd)
    try:
        kit.repo.save_handle(attempt, handle_of(holder.pid).encode())
        with pytest.raises(errors.ConflictError, match="still running"):
            resolve_run(kit.repo, kit.receipts, run.id, "lost")
        assert kit.repo.get_run(run.id).status is RunStatus.RUNNING
    finally:
        holder.kill()
        holder.wait()


def test_resolve_refuses_while_the_wrapper_is_starting_before_it_takes_its_lock(
    kit: Kit,
) -> None:
    """From review: resolve in the window between the handle's save and the wrapper taking
    its lock settled the run, and the wrapper then ran the user's command anyway."""
    run, attempt = kit.left_running(None, starting=True)
    starting = subprocess.Popen(["sleep", "60"],
                                env={**os.environ, "QL3_LAUNCH_ATTEMPT_ID": attempt.id})
    try:
        kit.repo.save_handle(attempt, handle_of(starting.pid).encode())
        with pytest.raises(errors.ConflictError, match="still running"):
            resolve_run(kit.repo, kit.receipts, run.id, "lost")
        assert kit.repo.get_run(run.id).status is RunStatus.RUNNING
    finally:
        starting.kill()
        starting.wait()
