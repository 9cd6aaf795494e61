"""No import cycle inside a package (docs/architecture.md §1: dependencies point one way).

The graph is read from the source with ``ast``, without importing anything, and counts every
import: at module level, inside functions (the lazy imports that keep the edge footprint
small) and under ``TYPE_CHECKING``. A module that needs a name from a module that needs it
back shares that name through a third module below both (e.g. ``control/cli_common.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("control", "worker", "local", "shared", "client", "panel")


def _modules(package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package ``__init__``) for every module of ``package``."""
    base = ROOT / package
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted((base / "qinglong" / package).rglob("*.py")):
        parts = list(path.relative_to(base).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _imports(name: str, path: Path, is_package: bool, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports (``from m import sub`` counts
    as importing ``m.sub`` when that is a module)."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in known and target != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_sees_a_cycle_and_only_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_package(package: str) -> None:
    modules = _modules(package)
    assert modules, f"no modules found for {package}"
    known = set(modules)
    graph = {name: _imports(name, path, is_package, known)
             for name, (path, is_package) in modules.items()}
    cycles = _cycles(graph)
    described = [" -> ".join(c) + "  (edges: " + "; ".join(
        f"{a} imports {b}" for a in c for b in sorted(graph[a]) if b in c) + ")" for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(described)
