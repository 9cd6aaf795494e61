"""The PostgreSQL migration runner: ordered files, advisory lock, append-only SHA-256 ledger.

Files are ``migrations/postgres/NNNN-name.sql``; the first line of each is ``-- additive: true`` or
``-- additive: false``. The code pins how many files exist and the last one's checksum (the reviewed
hard cap, docs/protocols.md §4.1), so adding a migration is a reviewed change in two places. A
database whose ledger runs ahead of the code is accepted only when every extra row is additive
(rolling upgrades run migrations before code).

A small runner instead of yoyo-migrations/alembic: neither pins a count and last checksum,
records a per-file SHA-256 in an append-only ledger, nor accepts "ahead by additive only".

It runs on the same SQLAlchemy connection as everything else in ``control`` (docs/protocols.md §4.5,
issue 11 item 9: one way to reach PostgreSQL), not on a plain psycopg connection of its own:
the advisory lock, the ledger and the grants are ordinary statements in one transaction
(``with conn.begin()``), and a migration file, several statements, goes to the driver as one
simple-protocol query (``no_parameters``: no placeholders are read, so a ``%`` in a file is
literal). A second connection type would buy nothing here and would be one more path for
readiness and the tests to keep equal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from qinglong.control.db.engine import run_named
from qinglong.control.db.roles import (
    DEFAULT_RUNTIME_ROLE,
    apply_runtime_grants,
    refuse_non_owner,
)
from qinglong.control.errors import (
    MigrationCapError,
    MigrationChecksumError,
    SchemaNewerThanCodeError,
)
from qinglong.shared.digest import sha256_hex

if TYPE_CHECKING:
    from sqlalchemy import Connection

# ADR-0379 §阶段验收: the reviewed hard cap moves exactly, one migration at a time.
EXPECTED_MIGRATION_COUNT = 17
EXPECTED_LAST_SHA256 = "61040935791f7548511510cb25b89eb6715c2b33ab6fe3dd770f61f6442eca6a"

LEDGER_TABLE = "ql3_migration_ledger"
ADVISORY_LOCK_KEY = 0x716C335F6D6967  # "ql3_mig": one key for every replica and release
_NAME = re.compile(r"^(\d{4})-[a-z0-9][a-z0-9-]*\.sql$")
_HEADER = re.compile(r"^-- additive: (true|false)\n")

_LEDGER_DDL = f"""
CREATE TABLE IF NOT EXISTS {LEDGER_TABLE} (
    seq         integer PRIMARY KEY,
    name        text NOT NULL UNIQUE,
    sha256      text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{{64}}$'),
    additive    boolean NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
CREATE OR REPLACE FUNCTION {LEDGER_TABLE}_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{LEDGER_TABLE} is append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE OR REPLACE TRIGGER {LEDGER_TABLE}_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON {LEDGER_TABLE}
    FOR EACH STATEMENT EXECUTE FUNCTION {LEDGER_TABLE}_append_only();
"""


# several statements as one simple-protocol query, no placeholders read (a "%" is literal)
_WHOLE_FILE = {"no_parameters": True}


@dataclass(frozen=True, slots=True)
class MigrationFile:
    """One reviewed migration: ``seq`` (1-based), file ``name``, hex ``sha256`` of its bytes."""

    seq: int
    name: str
    sha256: str
    additive: bool
    sql: str


@dataclass(frozen=True, slots=True)
class LedgerRow:
    """One applied migration as recorded in the ledger."""

    seq: int
    name: str
    sha256: str
    additive: bool


@dataclass(frozen=True, slots=True)
class MigrateResult:
    """What ``migrate`` did: files applied now, and ledger rows ahead of this code."""

    applied: tuple[str, ...]
    ahead: tuple[str, ...]


def migrations_dir() -> Path:
    """The directory of reviewed files: packaged beside this module, else the source tree."""
    here = Path(__file__).resolve().parent
    packaged = here / "migrations_postgres"
    if packaged.is_dir():
        return packaged
    return here.parents[3] / "migrations" / "postgres"


def load_migration_files(directory: Path | None = None) -> list[MigrationFile]:
    """Read and validate every ``NNNN-name.sql`` in order (numbers 0001.. without gaps).

    Raises MigrationCapError on a bad name, a gap, or a missing ``-- additive:`` header.
    """
    files: list[MigrationFile] = []
    for path in sorted((directory or migrations_dir()).glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None or int(match.group(1)) != len(files) + 1:
            raise MigrationCapError(f"migration {path.name}: bad name or gap in numbering")
        data = path.read_bytes()
        text = data.decode("utf-8")
        header = _HEADER.match(text)
        if header is None:
            raise MigrationCapError(f"migration {path.name}: first line must be -- additive: ...")
        files.append(
            MigrationFile(len(files) + 1, path.name, sha256_hex(data), header.group(1) == "true",
                          text)
        )
    return files


def check_reviewed_cap(files: list[MigrationFile]) -> None:
    """Fail closed unless the files match the pinned count and last checksum (docs/protocols.md
    §4.1)."""
    last = files[-1].sha256 if files else ""
    if len(files) != EXPECTED_MIGRATION_COUNT or last != EXPECTED_LAST_SHA256:
        raise MigrationCapError(
            f"migration files ({len(files)}, last sha256 {last or '-'}) disagree with the "
            f"reviewed cap ({EXPECTED_MIGRATION_COUNT}, {EXPECTED_LAST_SHA256})"
        )


def read_ledger(conn: Connection) -> list[LedgerRow] | None:
    """The ledger rows in order, or None when the ledger table does not exist yet."""
    exists = run_named(conn, "SELECT to_regclass(%(t)s) IS NOT NULL", {"t": LEDGER_TABLE}
                       ).scalar_one()
    if not exists:
        return None
    rows = conn.exec_driver_sql(
        f"SELECT seq, name, sha256, additive FROM {LEDGER_TABLE} ORDER BY seq"  # noqa: S608
    ).all()
    return [LedgerRow(*cast(tuple[int, str, str, bool], r)) for r in rows]


def compare_ledger(files: list[MigrationFile], ledger: list[LedgerRow]) -> tuple[str, ...]:
    """Names of ledger rows ahead of the code; raises on a checksum drift or a non-additive one.

    Raises MigrationChecksumError when a known file differs from its ledger row, and
    SchemaNewerThanCodeError when a row beyond the code's files is not additive.
    """
    for row, file in zip(ledger, files, strict=False):
        if (row.seq, row.name, row.sha256) != (file.seq, file.name, file.sha256):
            raise MigrationChecksumError(
                f"ledger row {row.seq} ({row.name}, {row.sha256}) differs from {file.name}"
            )
    ahead = ledger[len(files):]
    for row in ahead:
        if not row.additive:
            raise SchemaNewerThanCodeError(f"non-additive migration {row.name} is newer than code")
    return tuple(row.name for row in ahead)


def migrate(
    conn: Connection,
    *,
    runtime_role: str = DEFAULT_RUNTIME_ROLE,
    directory: Path | None = None,
    check_cap: bool = True,
    url_option: str = "--database-url",
) -> MigrateResult:
    """Apply pending migrations and the runtime role's grants in one transaction.

    When the ledger is ahead of this code (additive only), nothing is applied and the grants
    are left to the newer release, so an old replica's migrate never revokes them.

    Runs as the migration owner (the connection's user). Concurrent callers serialise on
    ``pg_advisory_xact_lock``; the second one finds nothing pending. ``conn`` is an SQLAlchemy
    Connection (``engine.connect()``) that must not be in a transaction: this opens and
    commits its own. Raises MigrationOwnerRequiredError (nothing changed) when the connecting
    role cannot create in ``public``, the ControlSchemaError subclasses above, and
    RuntimeRoleError for a bad role name. ``url_option`` names where the URL came from in
    that refusal (the flag or its environment variable).
    """
    files = load_migration_files(directory)
    if check_cap:
        check_reviewed_cap(files)
    applied: list[str] = []
    with conn.begin():
        refuse_non_owner(conn, url_option)  # inside: nothing has changed when it refuses
        run_named(conn, "SELECT pg_advisory_xact_lock(%(key)s)", {"key": ADVISORY_LOCK_KEY})
        conn.exec_driver_sql(_LEDGER_DDL, execution_options=_WHOLE_FILE)
        ahead = compare_ledger(files, read_ledger(conn) or [])
        done = len(read_ledger(conn) or [])
        for file in files[done:]:
            conn.exec_driver_sql(file.sql, execution_options=_WHOLE_FILE)
            run_named(
                conn,
                f"INSERT INTO {LEDGER_TABLE} (seq, name, sha256, additive)"  # noqa: S608
                " VALUES (%(seq)s, %(name)s, %(sha256)s, %(additive)s)",
                {"seq": file.seq, "name": file.name, "sha256": file.sha256,
                 "additive": file.additive},
            )
            applied.append(file.name)
        if not ahead:  # a newer release owns the grants of a schema ahead of this code
            apply_runtime_grants(conn, runtime_role)
    return MigrateResult(tuple(applied), ahead)
