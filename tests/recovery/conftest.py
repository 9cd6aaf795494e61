"""Fixtures for the reconciler tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from recovery_kit import Kit


@pytest.fixture
def kit(tmp_path: Path) -> Iterator[Kit]:
    k = Kit(tmp_path)
    yield k
    k.db.close()
