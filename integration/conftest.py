"""Fixtures for the integration tier."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from harness import initialised_data_dir, ql3

if TYPE_CHECKING:
    from pg_reaper import Reaper

__all__ = ["initialised_data_dir", "pg_reaper", "ql3"]


@pytest.fixture(scope="session")
def pg_reaper() -> Iterator[Reaper]:
    """Drops the session's throwaway databases behind the tests (``pg_reaper.Reaper``); at
    the end of the session, waits until all are gone."""
    from pg_reaper import Reaper

    reaper = Reaper()
    yield reaper
    reaper.close()
