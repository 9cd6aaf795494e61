"""Settings and global variables of the local database (migration 0002; the values of a
variable: ``variables``).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``. Variable values are secrets: never in a view, a log line or an error message.
"""

from __future__ import annotations

from collections.abc import Callable

from qinglong.local.storage.database import Database


class SettingsStore:
    """Settings and global variables (mixin; needs ``db`` and ``clock`` of the repository).
    All methods raise StorageError/StorageClosedError/StorageBusyError from the Database."""

    db: Database
    clock: Callable[[], int]

    def get_setting(self, key: str) -> str | None:
        """A value of the settings table, or None."""
        row = self.db.read(
            lambda c: c.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        )
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        """Insert or replace a settings value."""
        self.db.write(
            lambda c: c.execute(
                "INSERT INTO settings (key, value) VALUES (?, ?)"
                " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        )

    def delete_setting(self, key: str) -> bool:
        """Remove a settings value (back to its default); False if it was not set."""
        return self.db.write(
            lambda c: c.execute("DELETE FROM settings WHERE key = ?", (key,)).rowcount > 0
        )

    # -- global variables (migration 0002) -------------------------------------------------

    def set_global_variable(self, name: str, value: str, source: str) -> bool:
        """Make ``name`` the one enabled ``value`` every task receives (DESIGN.md §3.3;
        :mod:`qinglong.local.storage.variables` for several values). ``name`` must match
        ``[A-Za-z_][A-Za-z0-9_]*``; ``value`` a string without NUL; ``source`` says where it
        came from (for example ``qinglong2``). Returns True when the stored values or
        source changed. Raises ValidationError (which never echoes the value)."""
        from qinglong.local.storage import variables

        before = self.db.read(lambda c: c.execute(
            "SELECT source FROM global_variables WHERE name = ?", (name,)).fetchone())

        def edit(values: variables.Values) -> bool:
            changed = values != [[value, "", True]]  # 1 == True: as read back
            values[:] = [[value, "", True]]
            return changed

        changed = variables.change(self.db, self.clock(), name, edit, source=source)
        return bool(changed or before is None or before[0] != source)

    def global_variables(self) -> dict[str, str]:
        """Every global variable with an enabled value as ``{name: the enabled values joined
        with &}``. The values are secrets: pass them to a task's environment, never to a
        view, a log line or an error message."""
        from qinglong.local.storage.variables import environment

        return self.db.read(environment)

    def global_secret_names(self) -> set[str]:
        """Names of the global variables marked secret (their values are masked in task
        logs: docs/operations.md "Secrets in output"); names only, never a value."""
        return self.db.read(lambda c: {str(n) for (n,) in c.execute(
            "SELECT name FROM global_variables WHERE secret")})

    def list_global_variables(self) -> list[tuple[str, str, int]]:
        """``(name, source, updated_at_ms)`` of every global variable by name (no values)."""
        return self.db.read(
            lambda c: [
                (str(n), str(s), int(u))
                for n, s, u in c.execute(
                    "SELECT name, source, updated_at_ms FROM global_variables ORDER BY name"
                )
            ]
        )
