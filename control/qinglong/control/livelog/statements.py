"""The named statements of ``livelog/queries.sql`` (read once per process)."""

from __future__ import annotations

from pathlib import Path
from typing import LiteralString

from qinglong.control.db.queries import load_queries

_DIR = str(Path(__file__).resolve().parent)


def sql(name: str) -> LiteralString:
    """The statement named ``name`` in ``livelog/queries.sql``; KeyError when unknown."""
    return load_queries(_DIR, "queries.sql")[name]
