"""Fixtures: a migrated database in a temporary directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from qinglong.local.storage.database import Database
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = open_database(str(tmp_path / "ql3.db"))
    yield database
    database.close()


@pytest.fixture
def repo(db: Database) -> LocalRunRepository:
    return LocalRunRepository(db)
