"""Helpers for the storage tests."""

from __future__ import annotations

from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Task
from qinglong.shared.ids import uuid7


def make_task(repo: LocalRunRepository, name: str = "t", **kw: object) -> Task:
    fields: dict[str, object] = {"argv": ("true",), "schedule": "* * * * *"}
    fields.update(kw)
    return repo.create_task(Task(id=uuid7(), name=name, **fields))  # type: ignore[arg-type]
