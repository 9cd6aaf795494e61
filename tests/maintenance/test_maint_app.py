"""Wiring into the composition root (ADR-0069 §5, docs/protocols.md §3.6) and `ql3 local logs` of a
retired log (docs/protocols.md §3.8), over a real data directory."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from maint_kit import BOOT_ID, DAY_MS

from qinglong.local.app.application import LocalStack
from qinglong.local.app.cli import run_main
from qinglong.local.app.datadir import DataDir
from qinglong.local.app.display import when
from qinglong.local.app.store import LocalStore
from qinglong.local.app.views import iso
from qinglong.local.execution.coordinator import ExecutionCoordinator
from qinglong.local.recovery.lifecycle import CleanupLifecycle
from qinglong.local.recovery.retention import LocalRetention, RetentionConfig, RetentionLifecycle
from qinglong.shared.domain import Task, Trigger
from qinglong.shared.ids import uuid7
from qinglong.shared.statuses import AttemptStatus

HANDLE = f"ql3lp1:{BOOT_ID}:42:42:7"


def init(tmp_path: Path, profile: str = "edge") -> DataDir:
    root = tmp_path / "data"
    assert run_main(["local", "init", "--data-dir", str(root), "--profile", profile]) == 0
    return DataDir.at(str(root))


def maint_threads() -> set[str]:
    return {t.name for t in threading.enumerate()} & {"ql3-receipt-cleanup", "ql3-retention"}


def test_assembly_creates_the_lifecycles_without_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    datadir = init(tmp_path, "edge")
    store = LocalStore(datadir, "test")
    try:
        before = threading.active_count()
        stack = LocalStack(store)
        assert threading.active_count() == before
        assert isinstance(stack.cleanup, CleanupLifecycle)
        assert isinstance(stack.retention, RetentionLifecycle)
        assert not stack.cleanup.running and not stack.retention.running
        assert (stack.cleanup.tick_s, stack.cleanup.stop_wait_s) == (300, 2.0)
        assert stack.cleanup.scanner.config.page_size == 8
        assert stack.cleanup.scanner.config.missing_receipt_retention_s == 24 * 3600
        config = stack.retention.retention.config
        assert (config.log_retention_days, config.history_retention_days) == (7, 30)
        assert stack.retention.tick_s == 900
        page = stack.cleanup_startup_page()
        assert page is not None and page.seen == 0 and page.failed == 0
        stack.start_maintenance()
        stack.start_maintenance()
        assert maint_threads() == {"ql3-receipt-cleanup", "ql3-retention"}
        stack.stop_maintenance()
        stack.stop_maintenance()
        assert maint_threads() == set()
    finally:
        store.close()


def test_the_startup_page_settles_a_leftover_receipt(tmp_path: Path) -> None:
    datadir = init(tmp_path, "standalone")
    store = LocalStore(datadir, "test")
    try:
        stack = LocalStack(store)
        repo = store.repo
        task = repo.create_task(Task(id=uuid7(), name="t", argv=("true",), schedule="@once"))
        run = repo.create_run(task.id, Trigger.MANUAL)
        assert run is not None
        attempt = repo.claim_attempt(run)
        repo.register(run.id, attempt.id, stack.receipts.receipt_path(attempt.id))
        repo.finish_attempt(attempt, AttemptStatus.LOST)
        stack.receipts.prepare_shard(attempt.id)
        Path(stack.receipts.receipt_path(attempt.id)).write_bytes(b"{}")
        page = stack.cleanup_startup_page()
        assert page is not None and page.seen == 1 and page.failed == 0
        assert repo.journal_rows() == []
        assert not os.path.exists(stack.receipts.receipt_path(attempt.id))
    finally:
        store.close()


def test_serve_runs_the_cleanup_page_and_stops_maintenance_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qinglong.local.app.server import SocketServer

    datadir = init(tmp_path)
    order: list[str] = []

    def record(name: str, result: Any = None) -> Any:
        def call(*args: object, **kwargs: object) -> Any:
            order.append(name)
            return result

        return call

    def open_admission(self: object) -> None:
        order.append("admission open")
        os.kill(os.getpid(), signal.SIGTERM)  # serve's own handler sets its stop event

    monkeypatch.setattr(LocalStack, "recover", record("recover"))
    monkeypatch.setattr(LocalStack, "cleanup_startup_page", record("cleanup page"))
    monkeypatch.setattr(LocalStack, "start_maintenance", record("maintenance start"))
    monkeypatch.setattr(LocalStack, "stop_maintenance", record("maintenance stop"))
    monkeypatch.setattr(LocalStack, "run_loop", record("scheduler loop"))
    monkeypatch.setattr(ExecutionCoordinator, "drain", record("stack drain", 0))
    monkeypatch.setattr(SocketServer, "__init__", record("admission ready"))
    monkeypatch.setattr(SocketServer, "start", open_admission)
    monkeypatch.setattr(SocketServer, "stop", record("admission drain"))
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert run_main(["local", "serve", "--data-dir", datadir.root]) == 0
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    order.remove("scheduler loop")  # its own thread: only its start is ordered
    assert order == [
        "recover", "cleanup page", "maintenance start", "admission ready", "admission open",
        "admission drain", "maintenance stop", "stack drain",
    ]


def test_logs_of_a_retired_log_say_gone_and_when(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    datadir = init(tmp_path)
    store = LocalStore(datadir, "test")
    try:
        repo = store.repo
        task = repo.create_task(Task(id=uuid7(), name="t", argv=("true",), schedule="@once"))
        run_ids = []
        for _ in range(2):
            run = repo.create_run(task.id, Trigger.MANUAL)
            assert run is not None
            attempt = repo.claim_attempt(run)
            log = Path(datadir.log_root) / task.id / f"{run.id}.1.log"
            attempt = repo.record_start_intent(attempt, log_path=str(log), deadline_at_ms=None)
            log.parent.mkdir(mode=0o700, exist_ok=True)
            log.write_bytes(b"output\n")
            attempt = repo.save_handle(attempt, HANDLE)
            repo.finish_attempt(attempt, AttemptStatus.SUCCEEDED, exit_code=0)
            run_ids.append(run.id)
        retired_at = repo.clock() + 8 * DAY_MS
        LocalRetention(repo, RetentionConfig(
            log_root=datadir.log_root, log_retention_days=7, history_retention_days=30,
            batch=1, clock=lambda: retired_at,
        )).run_tick()  # batch 1: only the first run's log
        os.unlink(Path(datadir.log_root) / task.id / f"{run_ids[1]}.1.log")  # by accident
    finally:
        store.close()
    capsys.readouterr()
    assert run_main(["local", "logs", run_ids[0], "--utc", "--data-dir", datadir.root]) == 0
    out = capsys.readouterr()
    assert out.out == ""
    assert f"gone (retired at {when(iso(retired_at))})" in out.err
    assert when(iso(retired_at)).endswith(" +00:00")
    assert run_main(["local", "logs", run_ids[1], "--data-dir", datadir.root]) == 1
    out = capsys.readouterr()
    assert "missing" in out.err and "retired" not in out.err
