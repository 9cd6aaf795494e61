"""Fixtures for qinglong.local.process tests: real files in tmp_path, real processes."""

from __future__ import annotations

import contextlib
import ctypes
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_testkit import Env, FakeJournal

from qinglong.local.process import launcher as launcher_module

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(scope="session", autouse=True)
def _subreaper() -> Iterator[None]:
    """Adopt orphans of the process trees under test so they can be reaped here.

    This machine's pid 1 may not reap orphans, and a zombie still counts as a member of its
    process group; tests that assert a group is gone reap its orphaned zombies themselves.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    """Directories, a fake journal, and a spy recording every Popen the launcher makes."""
    spawned: list[subprocess.Popen[bytes]] = []
    real_popen = subprocess.Popen

    class SpyPopen(real_popen):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            spawned.append(self)

    monkeypatch.setattr(launcher_module.subprocess, "Popen", SpyPopen)
    cwd = tmp_path / "work"
    cwd.mkdir()
    yield Env(
        tmp=tmp_path,
        journal=FakeJournal(),
        log_root=tmp_path / "logs",
        receipt_root=tmp_path / "receipts",
        cwd=cwd,
        marker=tmp_path / "user-code-ran",
        spawned=spawned,
    )
    for proc in spawned:  # reap every wrapper a test left (an unreaped Popen warns at GC)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        proc.wait(30)
