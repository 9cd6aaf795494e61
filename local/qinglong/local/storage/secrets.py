"""A task's secret environment variables (migration 0006, issue 12 item 7, docs/protocols.md §3.3).

Each entry is a literal value (read by the CLI from stdin, never argv) or a reference
``@VAR`` to a global variable, resolved at every start so a changed variable applies to the
next attempt. Values are secrets: functions here return them only to the coordinator that
builds an attempt's environment; views get :func:`masked` (``********`` or ``@VAR``). No
error message here contains a value.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from qinglong.local.storage.database import Database
from qinglong.shared.errors import ConflictError, QinglongError, ValidationError

SECRET_MASK = "********"  # noqa: S105 (the mask, not a secret)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED = ("QL3_RECEIPT_", "QL3_LAUNCH_")


class SecretVariableMissingError(QinglongError):
    """A task's secret refers to a global variable that no longer exists (found at start:
    the attempt fails with this code and the two names, never a value)."""

    code = "secret_variable_missing"

    def __init__(self, env_name: str, variable: str) -> None:
        super().__init__(f"secret {env_name} refers to global variable {variable}, "
                         "which does not exist")
        self.env_name = env_name
        self.variable = variable


@dataclass(frozen=True, slots=True)
class SecretEntry:
    """Exactly one of ``value`` (a literal secret) and ``variable`` (a global variable's
    name) is set."""

    value: str | None = None
    variable: str | None = None

    @staticmethod
    def from_json(obj: object) -> SecretEntry:
        """``{"value": str}`` or ``{"variable": str}`` (the socket's shape). Raises
        ValidationError("secret_env", ...) without echoing a value."""
        if isinstance(obj, dict) and set(obj) == {"value"} and isinstance(obj["value"], str):
            return SecretEntry(value=obj["value"])
        if isinstance(obj, dict) and set(obj) == {"variable"} and isinstance(
                obj["variable"], str):
            return SecretEntry(variable=obj["variable"])
        raise ValidationError("secret_env", "each entry is {value} or {variable}")

    def to_json(self) -> dict[str, str]:
        """The socket's shape (carries the value: only over the owner's 0600 socket)."""
        return {"value": self.value} if self.value is not None else {
            "variable": str(self.variable)}


def validate_entries(entries: Mapping[str, SecretEntry]) -> None:
    """Names ``[A-Za-z_][A-Za-z0-9_]*``, not reserved; literal values without NUL; references
    naming a well-formed variable. Raises ValidationError("secret_env", ...) (no value)."""
    for name, entry in entries.items():
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValidationError("secret_env", "names must match [A-Za-z_][A-Za-z0-9_]*")
        if name.startswith(_RESERVED):
            raise ValidationError("secret_env",
                                  "names starting QL3_RECEIPT_ or QL3_LAUNCH_ are reserved")
        if entry.value is not None and "\x00" in entry.value:
            raise ValidationError("secret_env", f"the value of {name} contains a NUL byte")
        if entry.variable is not None and not _NAME.fullmatch(entry.variable):
            raise ValidationError("secret_env", f"{name}=@VAR: VAR must match "
                                                "[A-Za-z_][A-Za-z0-9_]*")
        if (entry.value is None) == (entry.variable is None):
            raise ValidationError("secret_env", f"{name} needs a value or a @VAR reference")


def write_entries(
    conn: sqlite3.Connection,
    task_id: str,
    entries: Mapping[str, SecretEntry],
    unset: Iterable[str],
    at: int,
) -> list[str]:
    """Inside a write transaction: remove ``unset``, then upsert ``entries``. Every
    referenced global variable must exist now (else ValidationError naming it). Returns the
    names whose stored entry changed, sorted (for a task event: names only)."""
    validate_entries(entries)
    changed: set[str] = set()
    for name in unset:
        if conn.execute("DELETE FROM task_secret_env WHERE task_id = ? AND name = ?",
                        (task_id, name)).rowcount:
            changed.add(name)
    for name, entry in entries.items():
        if entry.variable is not None and conn.execute(
                "SELECT 1 FROM global_variables WHERE name = ?", (entry.variable,)
        ).fetchone() is None:
            raise ValidationError("secret_env", f"{name}=@{entry.variable}: no global variable "
                                                f"{entry.variable} (set it with `ql3 local vars "
                                                "set`)")
        row = conn.execute("SELECT value, variable FROM task_secret_env WHERE task_id = ? AND"
                           " name = ?", (task_id, name)).fetchone()
        if row is not None and (row[0], row[1]) == (entry.value, entry.variable):
            continue
        conn.execute(
            "INSERT INTO task_secret_env (task_id, name, value, variable, updated_at_ms)"
            " VALUES (?, ?, ?, ?, ?) ON CONFLICT (task_id, name) DO UPDATE SET"
            " value = excluded.value, variable = excluded.variable,"
            " updated_at_ms = excluded.updated_at_ms",
            (task_id, name, entry.value, entry.variable, at),
        )
        changed.add(name)
    return sorted(changed)


def masked(refs: Mapping[str, str | None]) -> dict[str, str]:
    """A view of a task's secrets: ``********`` for a literal, ``@VAR`` for a reference."""
    return {name: SECRET_MASK if var is None else f"@{var}" for name, var in refs.items()}


class TaskSecretStore:
    """Reads and writes ``task_secret_env`` and removes global variables, through the one
    Database of the data directory. Methods raise what Database raises (StorageError...)."""

    def __init__(self, db: Database, clock: Callable[[], int]) -> None:
        self.db = db
        self.clock = clock

    def refs(self, task_id: str) -> dict[str, str | None]:
        """``{name: referenced variable or None}`` of one task, by name (no values)."""
        return self.db.read(lambda c: {
            str(n): None if v is None else str(v) for n, v in c.execute(
                "SELECT name, variable FROM task_secret_env WHERE task_id = ? ORDER BY name",
                (task_id,))})

    def refs_by_task(self) -> dict[str, dict[str, str | None]]:
        """:meth:`refs` of every task that has secrets, in one query."""
        def op(conn: sqlite3.Connection) -> dict[str, dict[str, str | None]]:
            out: dict[str, dict[str, str | None]] = {}
            for task_id, name, var in conn.execute(
                    "SELECT task_id, name, variable FROM task_secret_env ORDER BY name"):
                out.setdefault(str(task_id), {})[str(name)] = None if var is None else str(var)
            return out
        return self.db.read(op)

    def resolve(self, task_id: str) -> dict[str, str]:
        """The secret environment of one task with references resolved now: ``{name:
        value}`` (secrets: for the attempt's environment only). Raises
        SecretVariableMissingError when a referenced variable is gone."""
        def op(conn: sqlite3.Connection) -> dict[str, str]:
            env: dict[str, str] = {}
            for name, value, var, found in conn.execute(
                    "SELECT s.name, s.value, s.variable, g.value FROM task_secret_env s"
                    " LEFT JOIN global_variables g ON g.name = s.variable"
                    " WHERE s.task_id = ?", (task_id,)):
                if value is not None:
                    env[str(name)] = str(value)
                elif found is None:
                    raise SecretVariableMissingError(str(name), str(var))
                else:
                    env[str(name)] = str(found)
            return env
        return self.db.read(op)

    def remove_global_variable(self, name: str) -> bool:
        """Delete a global variable; False if there was none. Raises ConflictError naming
        the live tasks whose secret refers to it (nothing changes then)."""
        def op(conn: sqlite3.Connection) -> bool:
            users = [str(r[0]) for r in conn.execute(
                "SELECT DISTINCT t.name FROM task_secret_env s JOIN tasks t ON t.id = s.task_id"
                " WHERE s.variable = ? AND t.deleted_at_ms IS NULL ORDER BY t.name", (name,))]
            if users:
                raise ConflictError(f"global variable {name} is referenced by task(s) "
                                    f"{', '.join(users)} (--secret-env NAME=@{name}); "
                                    "change them first")
            return conn.execute("DELETE FROM global_variables WHERE name = ?",
                                (name,)).rowcount > 0
        return self.db.write(op)
