"""Global variables with several values (migration 0008, DESIGN.md §3.3).

A variable holds values at positions 1..n, each with a remark and an enabled flag; a task
gets ``NAME`` = the enabled values joined with ``&`` (none enabled: no ``NAME``), which
``global_variables.value`` keeps for ``--secret-env NAME=@VAR``. Values are secrets: they
leave here only for a task's environment, or via :meth:`VariableStore.reveal` when the
variable is not secret. No error message contains a value.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from typing import Any

from qinglong.local.storage.database import Database
from qinglong.shared.errors import ConflictError, NotFoundError, ValidationError

JOIN = "&"
REMARK_MAX_CHARS = 200
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_name(name: object) -> str:
    """``name`` if it matches ``[A-Za-z_][A-Za-z0-9_]*``; raises ValidationError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationError("variable", "names must match [A-Za-z_][A-Za-z0-9_]*")
    return name


def check_remark(remark: object) -> str:
    """A remark: a string of at most 200 characters without control characters."""
    if not isinstance(remark, str) or len(remark) > REMARK_MAX_CHARS or any(
            ord(ch) < 32 or ord(ch) == 127 for ch in remark):
        raise ValidationError("remark", f"a remark is at most {REMARK_MAX_CHARS} characters "
                                        "on one line")
    return remark


def joined(values: list[tuple[str, bool]]) -> str | None:
    """The enabled values joined with ``&`` in order; None when none is enabled."""
    enabled = [value for value, on in values if on]
    return JOIN.join(enabled) if enabled else None


class VariableStore:
    """Reads and writes of ``global_variables`` and ``global_variable_values``."""

    def __init__(self, db: Database, clock: Callable[[], int],
                 check: Callable[[dict[str, str]], None] | None = None) -> None:
        """``check(env)`` runs in each write's transaction; raising rolls it back."""
        self.db = db
        self.clock = clock
        self.check = check

    def _after(self, conn: sqlite3.Connection, name: str) -> None:
        _sync(conn, name)
        if self.check is not None:
            self.check(_environment(conn))

    # -- reads ----------------------------------------------------------------------------

    def entries(self) -> list[dict[str, Any]]:
        """Every variable by name: ``{"name", "secret", "source", "values": [{"index",
        "remark", "enabled", "updated_at_ms"}]}``; never a value."""
        def op(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            values: dict[str, list[dict[str, Any]]] = {}
            for name, pos, remark, on, at in conn.execute(
                    "SELECT name, position, remark, enabled, updated_at_ms"
                    " FROM global_variable_values ORDER BY name, position"):
                values.setdefault(name, []).append(
                    {"index": pos, "remark": remark, "enabled": bool(on), "updated_at_ms": at})
            return [{"name": n, "secret": bool(s), "source": src, "values": values.get(n, [])}
                    for n, s, src in conn.execute(
                        "SELECT name, secret, source FROM global_variables ORDER BY name")]
        return self.db.read(op)

    def environment(self) -> dict[str, str]:
        """``{NAME: joined enabled values}`` for every variable with an enabled value:
        secrets, for a task's environment only."""
        return self.db.read(_environment)

    def reveal(self, name: str) -> list[str]:
        """The values of a non-secret variable in order. Raises NotFoundError, or
        ConflictError for a secret variable (its values are never shown)."""
        def op(conn: sqlite3.Connection) -> list[str]:
            row = conn.execute("SELECT secret FROM global_variables WHERE name = ?",
                               (name,)).fetchone()
            if row is None:
                raise NotFoundError(f"no such variable {name!r}")
            if row[0]:
                raise ConflictError(f"variable {name} is secret: its values are never shown "
                                    "(set it with --plain to make it readable)")
            return [str(v) for (v,) in conn.execute(
                "SELECT value FROM global_variable_values WHERE name = ? ORDER BY position",
                (name,))]
        return self.db.read(op)

    # -- writes ---------------------------------------------------------------------------

    def put(self, name: str, value: str, *, source: str, remark: str | None = None,
            position: int | None = None, append: bool = False,
            secret: bool | None = None) -> int:
        """Store ``value``; returns its position. ``append``: a new last value;
        ``position``: replace that one (its flag, and remark unless given, kept); neither:
        the variable becomes this one value. ``secret`` None keeps the flag (new: secret).
        Raises ValidationError (never echoing the value), NotFoundError."""
        check_name(name)
        if not isinstance(value, str) or "\x00" in value:
            raise ValidationError("variable", "values must be strings without NUL bytes")
        if remark is not None:
            check_remark(remark)
        at = self.clock()

        def op(conn: sqlite3.Connection) -> int:
            conn.execute(
                "INSERT INTO global_variables (name, value, source, updated_at_ms, secret)"
                " VALUES (?, '', ?, ?, ?) ON CONFLICT (name) DO UPDATE SET"
                " source = excluded.source, updated_at_ms = excluded.updated_at_ms",
                (name, source, at, 1 if secret is None else int(secret)))
            if secret is not None:
                conn.execute("UPDATE global_variables SET secret = ? WHERE name = ?",
                             (int(secret), name))
            if position is not None:
                done = conn.execute(
                    "UPDATE global_variable_values SET value = ?, remark = coalesce(?, remark),"
                    " updated_at_ms = ? WHERE name = ? AND position = ?",
                    (value, remark, at, name, position)).rowcount
                if not done:
                    raise NotFoundError(f"variable {name} has no value #{position}")
                pos = position
            elif append:
                pos = int(conn.execute(
                    "SELECT coalesce(max(position), 0) + 1 FROM global_variable_values"
                    " WHERE name = ?", (name,)).fetchone()[0])
                conn.execute(
                    "INSERT INTO global_variable_values (name, position, value, remark,"
                    " enabled, updated_at_ms) VALUES (?, ?, ?, ?, 1, ?)",
                    (name, pos, value, remark or "", at))
            else:
                conn.execute("DELETE FROM global_variable_values WHERE name = ?", (name,))
                conn.execute(
                    "INSERT INTO global_variable_values (name, position, value, remark,"
                    " enabled, updated_at_ms) VALUES (?, 1, ?, ?, 1, ?)",
                    (name, value, remark or "", at))
                pos = 1
            self._after(conn, name)
            return pos
        return self.db.write(op)

    def set_enabled(self, name: str, position: int | None, enabled: bool) -> int:
        """Enable or disable the value at ``position`` (None: every value); the values are
        kept. Returns how many changed. Raises NotFoundError."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> int:
            _must_exist(conn, name, position)
            where, args = ("name = ?", [name]) if position is None else (
                "name = ? AND position = ?", [name, position])
            changed = int(conn.execute(
                f"UPDATE global_variable_values SET enabled = ?, updated_at_ms = ?"  # noqa: S608
                f" WHERE {where} AND enabled <> ?", (int(enabled), at, *args, int(enabled))
            ).rowcount)
            self._after(conn, name)
            return changed
        return self.db.write(op)

    def remove_value(self, name: str, position: int) -> bool:
        """Remove one value; later ones move up one position. Returns True when it was the
        last value (the caller then removes the variable). Raises NotFoundError."""
        def op(conn: sqlite3.Connection) -> bool:
            _must_exist(conn, name, position)
            conn.execute("DELETE FROM global_variable_values WHERE name = ? AND position = ?",
                         (name, position))
            rows = [int(p) for (p,) in conn.execute(
                "SELECT position FROM global_variable_values WHERE name = ? AND position > ?"
                " ORDER BY position", (name, position))]
            for pos in rows:
                conn.execute("UPDATE global_variable_values SET position = ? WHERE name = ?"
                             " AND position = ?", (pos - 1, name, pos))
            _sync(conn, name)
            left = conn.execute("SELECT count(*) FROM global_variable_values WHERE name = ?",
                                (name,)).fetchone()[0]
            return int(left) == 0
        return self.db.write(op)


def _must_exist(conn: sqlite3.Connection, name: str, position: int | None) -> None:
    if conn.execute("SELECT 1 FROM global_variables WHERE name = ?", (name,)).fetchone() is None:
        raise NotFoundError(f"no such variable {name!r}")
    if position is not None and conn.execute(
            "SELECT 1 FROM global_variable_values WHERE name = ? AND position = ?",
            (name, position)).fetchone() is None:
        raise NotFoundError(f"variable {name} has no value #{position}")


def _environment(conn: sqlite3.Connection) -> dict[str, str]:
    rows: dict[str, list[tuple[str, bool]]] = {}
    for name, value, on in conn.execute(
            "SELECT name, value, enabled FROM global_variable_values ORDER BY name, position"):
        rows.setdefault(str(name), []).append((str(value), bool(on)))
    out = {name: joined(vals) for name, vals in rows.items()}
    return {name: value for name, value in out.items() if value is not None}


def _sync(conn: sqlite3.Connection, name: str) -> None:
    """Keep ``global_variables.value`` the joined enabled values ('' when none)."""
    rows = [(str(v), bool(on)) for v, on in conn.execute(
        "SELECT value, enabled FROM global_variable_values WHERE name = ? ORDER BY position",
        (name,))]
    conn.execute("UPDATE global_variables SET value = ? WHERE name = ?",
                 (joined(rows) or "", name))
