"""Log retirement: durable tombstone first, then the unlink, then done; `logs` says "gone
(retired at ...)" for a retired log and still fails for a log missing by accident."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from maint_kit import DAY_MS, Kit

from qinglong.local.app.service import LocalService, LogFileMissingError
from qinglong.local.app.views import iso
from qinglong.local.process.paths import UnsafePathError
from qinglong.local.recovery import retention as retention_module
from qinglong.local.recovery.retention import (
    LocalRetention,
    RetentionConfig,
    RetentionLifecycle,
    unlink_log,
)
from qinglong.shared.errors import ValidationError
from qinglong.shared.statuses import AttemptStatus


def retention(kit: Kit, *, log_days: int = 7, history_days: int = 30,
              batch: int = 200) -> LocalRetention:
    return LocalRetention(kit.repo, RetentionConfig(
        log_root=str(kit.log_root), log_retention_days=log_days,
        history_retention_days=history_days, batch=batch,
    ))


def log_of(kit: Kit, attempt_id: str) -> str:
    path = kit.repo.get_attempt(attempt_id).log_path
    assert path is not None
    return path


def test_an_old_log_is_retired_with_a_tombstone_and_logs_says_so(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED, log=b"hello\n")
    path = log_of(kit, made.attempt.id)
    job = retention(kit)
    kit.clock.advance(7 * DAY_MS)  # exactly 7 days: not older yet
    assert job.run_tick().retired == 0
    assert os.path.exists(path)
    kit.clock.advance(1)
    assert job.run_tick().retired == 1
    assert not os.path.exists(path)
    tomb = kit.repo.log_tombstone(made.attempt.id)
    assert tomb is not None and tomb.done_at_ms == kit.clock() and tomb.reason == "retention"
    assert tomb.retired_at_ms == kit.clock() and tomb.log_path == path
    view = LocalService(kit.repo, supervised=False).logs_read(made.run.id)
    assert view["retired_at"] == iso(tomb.retired_at_ms)
    assert view["data"] == "" and view["done"] is True


def test_a_log_missing_by_accident_is_still_an_error(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.FAILED, log=b"x")
    os.unlink(log_of(kit, made.attempt.id))
    with pytest.raises(LogFileMissingError, match="missing"):  # exit 1, not a usage error
        LocalService(kit.repo, supervised=False).logs_read(made.run.id)


def test_the_tombstone_is_durable_before_the_unlink_and_done_after(
    kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED, log=b"x")
    kit.clock.advance(8 * DAY_MS)
    states: list[object] = []
    real = retention_module.unlink_log

    def spy(log_root: str, path: str) -> bool:
        tomb = kit.repo.log_tombstone(made.attempt.id)
        states.append(None if tomb is None else ("tombstone", tomb.done_at_ms))
        return real(log_root, path)

    monkeypatch.setattr(retention_module, "unlink_log", spy)
    retention(kit).run_tick()
    assert states == [("tombstone", None)], "written and committed before the unlink"
    tomb = kit.repo.log_tombstone(made.attempt.id)
    assert tomb is not None and tomb.done_at_ms is not None


def test_a_crash_between_tombstone_and_unlink_is_finished_next_tick(
    kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED, log=b"x")
    path = log_of(kit, made.attempt.id)
    kit.clock.advance(8 * DAY_MS)

    def crash(log_root: str, p: str) -> bool:
        raise OSError(5, "crash")

    monkeypatch.setattr(retention_module, "unlink_log", crash)
    assert retention(kit).run_tick().failed == 1
    monkeypatch.undo()
    assert os.path.exists(path)
    assert [t.attempt_id for t in kit.repo.unfinished_tombstones(10)] == [made.attempt.id]
    view = LocalService(kit.repo, supervised=False).logs_read(made.run.id)
    assert "retired_at" in view, "retired from the moment the tombstone is durable"
    result = retention(kit).run_tick()
    assert result.retired == 1 and result.failed == 0
    assert not os.path.exists(path)
    assert kit.repo.unfinished_tombstones(10) == []


def test_a_task_retention_overrides_the_profile_default(kit: Kit) -> None:
    keep = kit.task("long", log_retention_days=30)
    short = kit.task("short", log_retention_days=1)
    kept = kit.attempt(AttemptStatus.SUCCEEDED, task=keep, log=b"x")
    gone = kit.attempt(AttemptStatus.SUCCEEDED, task=short, log=b"x")
    default = kit.attempt(AttemptStatus.SUCCEEDED, log=b"x")
    kit.clock.advance(8 * DAY_MS)
    assert retention(kit, log_days=7).run_tick().retired == 2
    assert os.path.exists(log_of(kit, kept.attempt.id))
    assert not os.path.exists(log_of(kit, gone.attempt.id))
    assert not os.path.exists(log_of(kit, default.attempt.id))


def test_active_attempts_keep_their_logs(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.RUNNING, log=b"x")
    kit.clock.advance(100 * DAY_MS)
    assert retention(kit).run_tick().retired == 0
    assert os.path.exists(log_of(kit, made.attempt.id))


def test_retirement_is_bounded_per_tick(kit: Kit) -> None:
    for _ in range(5):
        kit.attempt(AttemptStatus.SUCCEEDED, log=b"x")
    kit.clock.advance(8 * DAY_MS)
    job = retention(kit, batch=2)
    assert [job.run_tick().retired for _ in range(4)] == [2, 2, 1, 0]


def test_a_log_already_gone_gets_a_done_tombstone(kit: Kit) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED)  # a log path, but no file was ever written
    kit.clock.advance(8 * DAY_MS)
    result = retention(kit).run_tick()
    assert result.already_gone == 1 and result.retired == 0
    tomb = kit.repo.log_tombstone(made.attempt.id)
    assert tomb is not None and tomb.done_at_ms is not None


def test_unlink_refuses_a_symlinked_directory_and_paths_outside_the_root(
    kit: Kit, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.log").write_text("keep")
    os.symlink(elsewhere, kit.log_root / "linked")
    with pytest.raises(UnsafePathError):
        unlink_log(str(kit.log_root), str(kit.log_root / "linked" / "x.log"))
    with pytest.raises(ValidationError):
        unlink_log(str(kit.log_root), str(elsewhere / "x.log"))
    with pytest.raises(ValidationError):
        unlink_log(str(kit.log_root), str(kit.log_root))
    assert (elsewhere / "x.log").read_text() == "keep"
    assert unlink_log(str(kit.log_root), str(kit.log_root / "none" / "x.log")) is False


def test_a_failing_unlink_only_counts(kit: Kit, tmp_path: Path) -> None:
    made = kit.attempt(AttemptStatus.SUCCEEDED)
    other = kit.attempt(AttemptStatus.SUCCEEDED, log=b"x")
    task_dir = Path(log_of(kit, made.attempt.id)).parent
    os.rename(task_dir, tmp_path / "moved")
    os.symlink(tmp_path / "moved", task_dir)  # the task's log directory became a symlink
    kit.clock.advance(8 * DAY_MS)
    result = retention(kit).run_tick()
    assert result.failed == 2 and result.retired == 0
    assert (tmp_path / "moved" / Path(log_of(kit, other.attempt.id)).name).exists()


def test_the_retention_lifecycle_runs_its_job_on_one_timer(kit: Kit) -> None:
    import time

    made = kit.attempt(AttemptStatus.SUCCEEDED, log=b"x")
    kit.clock.advance(8 * DAY_MS)
    life = RetentionLifecycle(retention(kit), tick_s=0.01, stop_wait_s=2, name="maint-ret")
    assert life.first_delay_s == 0.01
    life.start()
    deadline = time.monotonic() + 5
    while kit.repo.log_tombstone(made.attempt.id) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert life.stop() is True and life.stop() is True
    assert not os.path.exists(log_of(kit, made.attempt.id))
    assert RetentionLifecycle(retention(kit), tick_s=900, stop_wait_s=2).first_delay_s == 60
