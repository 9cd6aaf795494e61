"""Named SQL blocks loaded once from ``.sql`` files (procrastinate style).

A file holds blocks that start with ``-- name --`` and a one-line ``-- description``; the
statement follows up to the next block. A reviewer reads every statement the control plane
can run without reading Python.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import LiteralString

_BLOCK = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, LiteralString]:
    """Split ``text`` into ``{name: statement}``; ValueError on a duplicate or empty block."""
    parts = _BLOCK.split(text)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln for ln in body.strip().splitlines() if not ln.startswith("-- ")]
        statement = "\n".join(lines).strip()
        if name in queries or not statement:
            raise ValueError(f"query block {name!r} is duplicated or empty")
        queries[name] = statement  # mypy treats LiteralString as str
    return queries


@cache
def load_queries(package_dir: str, filename: str) -> dict[str, LiteralString]:
    """Named statements of ``package_dir/filename``, read once per process."""
    return parse_queries((Path(package_dir) / filename).read_text(encoding="utf-8"))
