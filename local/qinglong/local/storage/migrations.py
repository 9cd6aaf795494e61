"""Reviewed, ordered SQLite migrations with a checksum ledger (docs/protocols.md §3.1).

Schema comes only from ``migrations/sqlite/NNNN-name.sql``, applied in order, each inside
its own transaction, recorded in ``schema_migrations`` with the file's SHA-256. A changed or
missing applied file, or a database newer than the code, refuses to start with
:class:`SchemaMismatchError`.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from qinglong.local.storage.database import Database
from qinglong.shared.digest import sha256_hex
from qinglong.shared.errors import SchemaMismatchError

_NAME = re.compile(r"(\d{4})-([a-z0-9][a-z0-9-]*)\.sql")
LEDGER_DDL = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " version INTEGER PRIMARY KEY, name TEXT NOT NULL, sha256 TEXT NOT NULL,"
    " applied_at_ms INTEGER NOT NULL) STRICT"
)


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file: ``version`` from its 4-digit prefix, its text and SHA-256 hex."""

    version: int
    name: str
    sql: str
    sha256: str


def default_migrations_dir() -> Path:
    """The shipped migrations: inside the wheel, or ``migrations/sqlite`` of a checkout."""
    here = Path(__file__).resolve().parent
    packaged = here / "migrations_sqlite"
    if packaged.is_dir():
        return packaged
    return here.parents[3] / "migrations" / "sqlite"


def load_migrations(directory: Path) -> list[Migration]:
    """Read and order the migration files; numbering must be 1..N without gaps.

    Raises:
        SchemaMismatchError: a stray ``.sql`` name, a gap or a duplicate number.
    """
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.fullmatch(path.name)
        if not match:
            raise SchemaMismatchError(f"migration file name not NNNN-name.sql: {path.name}")
        data = path.read_bytes()
        found.append(
            Migration(
                int(match.group(1)), path.name, data.decode(), sha256_hex(data)
            )
        )
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise SchemaMismatchError(
                f"migrations must be numbered 1..N; {migration.name} breaks it"
            )
    if not found:
        raise SchemaMismatchError("no migrations found")
    return found


def apply_migrations(db: Database, migrations: list[Migration]) -> int:
    """Verify the ledger against the files and apply the missing ones, in order.

    Returns the number applied. Raises SchemaMismatchError (changed/missing applied file,
    database newer than the code) before applying anything.
    """

    def run(conn: sqlite3.Connection) -> int:
        conn.execute(LEDGER_DDL)
        applied = {
            int(version): (str(name), str(digest))
            for version, name, digest in conn.execute(
                "SELECT version, name, sha256 FROM schema_migrations ORDER BY version"
            )
        }
        by_version = {m.version: m for m in migrations}
        newest_known = migrations[-1].version
        for version, (name, digest) in applied.items():
            if version > newest_known:
                raise SchemaMismatchError(
                    f"the database schema (migration {version}) is newer than this code "
                    f"(knows {newest_known}); upgrade qinglong"
                )
            if by_version[version].sha256 != digest or by_version[version].name != name:
                raise SchemaMismatchError(
                    f"applied migration {name} was changed or renamed after it ran; "
                    "restore the reviewed file"
                )
        count = 0
        for migration in migrations:
            if migration.version in applied:
                continue
            conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _statements(migration.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, sha256, applied_at_ms)"
                    " VALUES (?, ?, ?, ?)",
                    (migration.version, migration.name, migration.sha256, int(time.time() * 1000)),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            count += 1
        return count

    return db.run_script(run)


def _statements(sql: str) -> list[str]:
    """Split a migration into complete statements (sqlite3.complete_statement)."""
    out: list[str] = []
    buf = ""
    for line in sql.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf)
            buf = ""
    if buf.strip() and not all(
        part.strip().startswith("--") or not part.strip() for part in buf.splitlines()
    ):
        raise SchemaMismatchError("migration ends with an incomplete statement")
    return out


def open_database(path: str, migrations_dir: Path | None = None) -> Database:
    """Open the database file and bring its schema up to date (docs/protocols.md §3.1).

    Raises SchemaMismatchError or StorageError; the connection is closed on failure.
    """
    db = Database(path)
    try:
        apply_migrations(db, load_migrations(migrations_dir or default_migrations_dir()))
    except BaseException:
        db.close()
        raise
    return db
