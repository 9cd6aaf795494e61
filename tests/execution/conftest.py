"""Fixtures: a real repository, launcher and coordinator over tmp_path."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest
from execution_kit import Stack

PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture(scope="session", autouse=True)
def _subreaper() -> Iterator[None]:
    """Adopt orphans (this machine's pid 1 does not reap them) so groups can empty."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()
