"""Test modules are imported by basename (pytest's default `prepend` import mode with no
`__init__.py` in the test folders): two integration files of the same name in different
folders stop the whole tier at collection ("import file mismatch"). This unit test fails
first, naming the pair."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for tier in ("integration", "tests"):
        for path in sorted((ROOT / tier).rglob("test_*.py")):
            seen[f"{tier}:{path.name}"].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
