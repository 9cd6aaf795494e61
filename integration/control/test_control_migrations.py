"""Migrations: reviewed hard cap, advisory lock, append-only SHA-256 ledger, additive-ahead."""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg
import pytest
from pg_control_db import PgDb

from qinglong.control.db import migrations as m
from qinglong.control.errors import (
    MigrationCapError,
    MigrationChecksumError,
    SchemaNewerThanCodeError,
)
from qinglong.control.readiness import readiness
from qinglong.shared.digest import sha256_hex

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
NEXT = m.EXPECTED_MIGRATION_COUNT + 1  # the first sequence number a newer release would use
EXPAND = f"{NEXT:04d}-future-expand.sql"
CONTRACT = f"{NEXT + 1:04d}-future-contract.sql"


def test_reviewed_cap_pins_the_file_count_and_the_last_checksum() -> None:
    files = m.load_migration_files()
    assert len(files) == m.EXPECTED_MIGRATION_COUNT
    assert files[-1].sha256 == m.EXPECTED_LAST_SHA256
    assert files[-1].sha256 == sha256_hex((m.migrations_dir() / files[-1].name).read_bytes())
    m.check_reviewed_cap(files)


def test_every_migration_declares_whether_it_is_additive() -> None:
    for path in sorted(m.migrations_dir().glob("*.sql")):
        first = path.read_text().splitlines()[0]
        assert first in {"-- additive: true", "-- additive: false"}, path.name


def test_a_file_added_without_moving_the_cap_fails_closed(tmp_path: Path) -> None:
    for file in m.load_migration_files():
        (tmp_path / file.name).write_text(file.sql)
    (tmp_path / f"{NEXT:04d}-extra.sql").write_text("-- additive: true\nSELECT 1;\n")
    with pytest.raises(MigrationCapError):
        m.check_reviewed_cap(m.load_migration_files(tmp_path))
    (tmp_path / f"{NEXT + 1:04d}-nohdr.sql").write_text("SELECT 1;\n")
    with pytest.raises(MigrationCapError):
        m.load_migration_files(tmp_path)


def test_migrate_records_each_file_once_with_its_sha256(empty_db: PgDb) -> None:
    with empty_db.sa() as sa:
        first = m.migrate(sa, runtime_role=empty_db.runtime_role)
        again = m.migrate(sa, runtime_role=empty_db.runtime_role)
        ledger = m.read_ledger(sa)
    assert len(first.applied) == m.EXPECTED_MIGRATION_COUNT
    assert again.applied == ()
    files = m.load_migration_files()
    assert ledger is not None
    assert [(r.name, r.sha256, r.additive) for r in ledger] == [
        (f.name, f.sha256, f.additive) for f in files
    ]


def test_concurrent_migrations_serialise_on_the_advisory_lock(empty_db: PgDb) -> None:
    results: list[object] = []

    def run() -> None:
        try:
            with empty_db.sa() as sa:
                results.append(m.migrate(sa, runtime_role=empty_db.runtime_role).applied)
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    applied = sorted(results, key=lambda r: len(r) if isinstance(r, tuple) else -1)
    assert all(isinstance(r, tuple) for r in results), results
    assert [len(r) for r in applied] == [0, 0, m.EXPECTED_MIGRATION_COUNT]  # type: ignore[arg-type]


def test_the_ledger_is_append_only_even_for_the_owner(pg_db: PgDb) -> None:
    with pg_db.connect() as conn:
        for stmt in (f"UPDATE {m.LEDGER_TABLE} SET additive = false",
                     f"DELETE FROM {m.LEDGER_TABLE}", f"TRUNCATE {m.LEDGER_TABLE}"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(stmt)


def _append_ledger(conn: psycopg.Connection[object], name: str, additive: bool) -> None:
    conn.execute(
        f"INSERT INTO {m.LEDGER_TABLE} (seq, name, sha256, additive) VALUES "
        f"((SELECT max(seq) + 1 FROM {m.LEDGER_TABLE}), %s, %s, %s)",
        (name, "c" * 64, additive),
    )


def test_a_schema_ahead_by_additive_migrations_is_accepted(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa, pg_db.pooled() as engine:
        _append_ledger(conn, EXPAND, True)
        role = pg_db.runtime_role
        conn.execute(f'CREATE TABLE future (x int); GRANT SELECT ON future TO "{role}"')
        result = m.migrate(sa, runtime_role=pg_db.runtime_role)
        held = conn.execute("SELECT has_table_privilege(%s, 'future', 'SELECT')",
                            (role,)).fetchone()
        assert held == (True,)  # an old replica's migrate leaves the newer grants alone
        verdict = readiness(engine, runtime_role=pg_db.runtime_role)
    assert result.ahead == (EXPAND,)
    assert verdict.ready, verdict
    assert verdict.ahead == (EXPAND,)


def test_a_non_additive_migration_ahead_of_the_code_is_refused(pg_db: PgDb) -> None:
    with pg_db.connect() as conn, pg_db.sa() as sa, pg_db.pooled() as engine:
        _append_ledger(conn, EXPAND, True)
        _append_ledger(conn, CONTRACT, False)
        with pytest.raises(SchemaNewerThanCodeError):
            m.migrate(sa, runtime_role=pg_db.runtime_role)
        verdict = readiness(engine, runtime_role=pg_db.runtime_role)
    assert (verdict.ready, verdict.reason) == (False, "schema_newer_than_code")


def test_a_recorded_file_that_changed_is_refused(pg_db: PgDb, tmp_path: Path) -> None:
    for file in m.load_migration_files():
        (tmp_path / file.name).write_text(file.sql + ("\n-- edited\n" if file.seq == 1 else ""))
    with pg_db.sa() as sa, pytest.raises(MigrationChecksumError):
        m.migrate(sa, runtime_role=pg_db.runtime_role, directory=tmp_path, check_cap=False)


def test_readiness_names_pending_migrations(empty_db: PgDb) -> None:
    with empty_db.pooled() as engine:
        verdict = readiness(engine, runtime_role=empty_db.runtime_role)
    assert (verdict.ready, verdict.reason) == (False, "migration_pending")


# An expand step of a newer release may grant the runtime role more on an existing table
# (DESIGN.md §4.1): this code accepts it only while the ledger is ahead by additive files,
# never for a privilege no release grants, and never a missing grant.
EXPAND_GRANT = "GRANT UPDATE ON worker_pools TO \"{role}\""


def _verdict(pg_db: PgDb, *statements: str, ahead: bool) -> tuple[bool, str | None, str]:
    with pg_db.connect() as conn, pg_db.pooled() as engine:
        if ahead:
            _append_ledger(conn, EXPAND, True)
        for statement in statements:
            conn.execute(statement.format(role=pg_db.runtime_role))
        verdict = readiness(engine, runtime_role=pg_db.runtime_role)
    return verdict.ready, verdict.reason, verdict.detail or ""


def test_an_expand_grant_on_an_existing_table_is_accepted_while_the_schema_is_ahead(
        pg_db: PgDb) -> None:
    grant_column = 'GRANT UPDATE (name) ON api_tokens TO "{role}"'  # column-level too
    assert _verdict(pg_db, EXPAND_GRANT, grant_column, ahead=True) == (True, None, "")


def test_the_same_grant_without_a_newer_migration_is_refused(pg_db: PgDb) -> None:
    ready, reason, detail = _verdict(pg_db, EXPAND_GRANT, ahead=False)
    assert (ready, reason) == (False, "runtime_role_invalid")
    assert "extra UPDATE on worker_pools" in detail


@pytest.mark.parametrize(("statement", "problem"), [
    ('GRANT UPDATE ON run_attempt_log_artifact_tombstones TO "{role}"',
     "extra UPDATE on run_attempt_log_artifact_tombstones"),
    ('GRANT UPDATE (outcome) ON run_attempt_log_artifact_tombstones TO "{role}"',
     "extra column-level UPDATE on run_attempt_log_artifact_tombstones"),
    (f'GRANT INSERT ON {m.LEDGER_TABLE} TO "{{role}}"', f"extra INSERT on {m.LEDGER_TABLE}"),
    ('GRANT TRUNCATE ON runs TO "{role}"', "extra TRUNCATE on runs"),
    ('CREATE TABLE future (x int); GRANT TRIGGER ON future TO "{role}"',
     "extra TRIGGER on future"),
    ('REVOKE SELECT ON tasks FROM "{role}"', "missing SELECT on tasks"),
])
def test_a_schema_ahead_never_excuses_a_forbidden_or_missing_grant(
        pg_db: PgDb, statement: str, problem: str) -> None:
    ready, reason, detail = _verdict(pg_db, EXPAND_GRANT, statement, ahead=True)
    assert (ready, reason) == (False, "runtime_role_invalid")
    assert problem in detail.split("; ")
