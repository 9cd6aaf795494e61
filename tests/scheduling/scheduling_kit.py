"""Shared pieces of the scheduler tests: injected wall and monotonic clocks over a real SQLite
repository (docs/protocols.md §3.7)."""

from __future__ import annotations

from pathlib import Path

from qinglong.local.storage.database import Database
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import ConcurrencyPolicy, Task
from qinglong.shared.ids import uuid7

T0 = 1_800_000_000_000
"""A whole hour (Unix ms): 2027-01-15T08:00:00Z."""
HOUR = 3_600_000


class Clocks:
    """Wall (Unix ms, ``now``; calling the object reads it) and monotonic (ms, ``mono``)
    clocks that move together unless a test steps one of them."""

    def __init__(self) -> None:
        self.now = T0
        self.mono = 10_000_000

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        """Move both clocks by ``ms``; returns the new wall time."""
        self.now += ms
        self.mono += ms
        return self.now


def open_repo(tmp_path: Path, clocks: Clocks) -> tuple[Database, LocalRunRepository]:
    """A migrated database in ``tmp_path`` and its repository on the wall clock ``clocks``."""
    db = open_database(str(tmp_path / "s.db"))
    return db, LocalRunRepository(db, clock=clocks)


def make_task(repo: LocalRunRepository, schedule: str, policy: str = "forbid",
              **kw: object) -> Task:
    """Store a task running ``true`` on ``schedule`` under ``policy`` (a unique name)."""
    return repo.create_task(Task(id=uuid7(), name=f"t{uuid7()[-8:]}", argv=("true",),
                                 schedule=schedule, concurrency=ConcurrencyPolicy(policy),
                                 **kw))  # type: ignore[arg-type]
