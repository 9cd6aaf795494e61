"""Global variables with several values (migration 0008, DESIGN.md §3.3).

A variable holds values at positions 1..n, each ``[value, remark, enabled]``; a task gets
``NAME`` = the enabled values joined with ``&`` (none enabled: no ``NAME``), which
``global_variables.value`` keeps for ``--secret-env NAME=@VAR``. Values are secrets: they
leave here only for a task's environment, or via :func:`reveal` for a non-secret variable.
No error message contains a value.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from qinglong.local.storage.database import Database
from qinglong.shared.errors import ConflictError, NotFoundError, ValidationError
from qinglong.shared.variable_limits import check_variable_name

Values = list[list[Any]]  # [[value, remark, enabled], ...] in position order


def check_name(name: object) -> str:
    """``name`` under the one rule of both profiles (``shared/variable_limits.py``
    ``check_variable_name``: ``[A-Za-z_][A-Za-z0-9_]*``, 1-128); raises ValidationError."""
    return check_variable_name(name)


def environment(conn: sqlite3.Connection) -> dict[str, str]:
    """``{NAME: enabled values joined with &}`` (secrets: for a task's environment)."""
    out: dict[str, list[str]] = {}
    for name, value in conn.execute("SELECT name, value FROM global_variable_values"
                                    " WHERE enabled ORDER BY name, position"):
        out.setdefault(name, []).append(value)
    return {name: "&".join(vals) for name, vals in out.items()}


def entries(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every variable by name: ``{"name", "secret", "source", "values": [{"index",
    "remark", "enabled", "updated_at_ms"}]}``; never a value."""
    values: dict[str, list[dict[str, Any]]] = {}
    for name, pos, remark, on, at in conn.execute(
            "SELECT name, position, remark, enabled, updated_at_ms"
            " FROM global_variable_values ORDER BY name, position"):
        values.setdefault(name, []).append(
            {"index": pos, "remark": remark, "enabled": bool(on), "updated_at_ms": at})
    return [{"name": n, "secret": bool(s), "source": src, "values": values.get(n, [])}
            for n, s, src in conn.execute(
                "SELECT name, secret, source FROM global_variables ORDER BY name")]


def reveal(conn: sqlite3.Connection, name: str) -> list[str]:
    """The values of a non-secret variable in order. Raises NotFoundError, or
    ConflictError for a secret one (never shown)."""
    row = conn.execute("SELECT secret FROM global_variables WHERE name = ?",
                       (name,)).fetchone()
    if row is None:
        raise NotFoundError(f"no such variable {name!r}")
    if row[0]:
        raise ConflictError(f"variable {name} is secret: its values are never shown "
                            "(set it with --plain to make it readable)")
    return [v for (v,) in conn.execute("SELECT value FROM global_variable_values"
                                       " WHERE name = ? ORDER BY position", (name,))]


def values_of(conn: sqlite3.Connection, name: str) -> Values | None:
    """The ``[value, remark, enabled]`` of ``name`` in order, None when there is no such
    variable (secrets: for comparisons, never for a view)."""
    if not conn.execute("SELECT 1 FROM global_variables WHERE name = ?", (name,)).fetchone():
        return None
    return [[v, r, bool(e)] for v, r, e in conn.execute(
        "SELECT value, remark, enabled FROM global_variable_values WHERE name = ?"
        " ORDER BY position", (name,))]


def change(db: Database, at: int, name: str, edit: Callable[[Values], Any], *,
           source: str | None = None, secret: bool | None = None,
           check: Callable[[dict[str, str]], None] | None = None) -> Any:
    """Apply ``edit`` to the values of ``name`` in one transaction and return its result.

    ``source`` given: a missing variable is created (secret unless ``secret`` is False;
    its name must follow :func:`check_name`), else NotFoundError (a variable stored under
    an older, looser rule can still be changed or removed). Values left empty remove the
    variable. ``check(environment)`` runs last; what it raises rolls everything back.
    ``global_variables.value`` is kept.
    """
    if source is not None:
        check_name(name)

    def op(conn: sqlite3.Connection) -> Any:
        if source is not None:
            conn.execute("INSERT INTO global_variables (name, value, source, updated_at_ms,"
                         " secret) VALUES (?, '', ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                         " source = excluded.source", (name, source, at, secret is not False))
        if secret is not None:
            conn.execute("UPDATE global_variables SET secret = ? WHERE name = ?",
                         (secret, name))
        if not conn.execute("SELECT 1 FROM global_variables WHERE name = ?",
                            (name,)).fetchone():
            raise NotFoundError(f"no such variable {name!r}")
        old = [list(r) for r in conn.execute(
            "SELECT value, remark, enabled, updated_at_ms FROM global_variable_values"
            " WHERE name = ? ORDER BY position", (name,))]
        values = [r[:3] for r in old]
        result = edit(values)
        conn.execute("DELETE FROM global_variable_values WHERE name = ?", (name,))
        for pos, (value, remark, on) in enumerate(values, 1):
            if "\x00" in value:
                raise ValidationError("variable", "values must be text without NUL bytes")
            same = pos <= len(old) and old[pos - 1][:3] == [value, remark, on]
            conn.execute("INSERT INTO global_variable_values VALUES (?, ?, ?, ?, ?, ?)",
                         (name, pos, value, remark, on, old[pos - 1][3] if same else at))
        joined = "&".join(v[0] for v in values if v[2])
        conn.execute("UPDATE global_variables SET value = ?, updated_at_ms = ? WHERE name = ?",
                     (joined, at, name))
        if not values:
            conn.execute("DELETE FROM global_variables WHERE name = ?", (name,))
        if check is not None:
            check(environment(conn))
        return result
    return db.write(op)
