"""ADR-0069 §6: an empty journal costs one indexed point query per tick and touches no file
and no /proc."""

from __future__ import annotations

import builtins
import os
from typing import Any

import pytest
from maint_kit import Kit

from qinglong.local.recovery.cleanup_scanner import (
    LocalCompletionReceiptCleanupScanner,
    ScannerConfig,
)
from qinglong.local.recovery.lifecycle import CleanupLifecycle
from qinglong.local.storage.database import Database


class ForbiddenStore:
    """A receipt store that fails on any use: the empty tick must not reach it."""

    root = "/nonexistent"

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the empty tick used the receipt store ({name})")


def forbid_files(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make every Python-level file or directory access fail, and record it."""
    touched: list[str] = []

    def refuse(name: str) -> Any:
        def call(*args: object, **kwargs: object) -> Any:
            touched.append(f"{name}{args[:1]}")
            raise AssertionError(f"the empty tick called {name}")

        return call

    for name in ("open", "stat", "lstat", "listdir", "scandir", "unlink", "rename", "mkdir",
                 "rmdir", "readlink", "access"):
        monkeypatch.setattr(os, name, refuse(f"os.{name}"))
    monkeypatch.setattr(builtins, "open", refuse("open"))
    return touched


def test_an_empty_tick_is_one_read_and_touches_no_file(
    kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    writes: list[str] = []
    real_read, real_write = Database.read, Database.write

    def counting_read(self: Database, fn: Any) -> Any:
        reads.append("read")
        return real_read(self, fn)

    def counting_write(self: Database, fn: Any) -> Any:
        writes.append("write")
        return real_write(self, fn)

    scanner = LocalCompletionReceiptCleanupScanner(
        kit.repo, ForbiddenStore(),  # type: ignore[arg-type]
        ScannerConfig(page_size=8, missing_receipt_retention_s=3600),
    )
    lifecycle = CleanupLifecycle(scanner, tick_s=300, stop_wait_s=2)
    monkeypatch.setattr(Database, "read", counting_read)
    monkeypatch.setattr(Database, "write", counting_write)
    touched = forbid_files(monkeypatch)
    for _ in range(3):
        result = lifecycle.run_once()
        assert result is not None
        assert result.seen == 0 and result.failed == 0 and not result.truncated
    monkeypatch.undo()
    assert touched == []
    assert reads == ["read"] * 3, "exactly one query per tick"
    assert writes == []
    assert lifecycle.cursor is None


def test_a_page_of_active_attempts_touches_no_file_either(
    kit: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qinglong.shared.statuses import AttemptStatus

    for _ in range(3):
        kit.attempt(AttemptStatus.RUNNING)
    scanner = LocalCompletionReceiptCleanupScanner(
        kit.repo, ForbiddenStore(),  # type: ignore[arg-type]
        ScannerConfig(page_size=8, missing_receipt_retention_s=3600),
    )
    touched = forbid_files(monkeypatch)
    result = scanner.run_page(None)
    monkeypatch.undo()
    assert touched == [] and result.seen == 3 and result.failed == 0
