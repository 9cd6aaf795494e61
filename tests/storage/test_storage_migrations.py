"""Reviewed migrations with a checksum ledger (docs/protocols.md §3.1)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from qinglong.local.storage.migrations import default_migrations_dir, open_database
from qinglong.shared.errors import SchemaMismatchError


@pytest.fixture
def migrations(tmp_path: Path) -> Path:
    target = tmp_path / "migrations"
    shutil.copytree(default_migrations_dir(), target)
    return target


def test_fresh_database_records_every_migration_with_its_sha256(tmp_path: Path) -> None:
    db = open_database(str(tmp_path / "a.db"))
    rows = db.read(lambda c: c.execute("SELECT version, name, sha256 FROM schema_migrations")
                   .fetchall())
    db.close()
    files = sorted(default_migrations_dir().glob("*.sql"))
    assert [r[1] for r in rows] == [f.name for f in files]
    import hashlib

    assert [r[2] for r in rows] == [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]


def test_reopening_applies_nothing_twice(tmp_path: Path) -> None:
    open_database(str(tmp_path / "a.db")).close()
    db = open_database(str(tmp_path / "a.db"))
    count = db.read(lambda c: c.execute("SELECT count(*) FROM schema_migrations").fetchone())
    db.close()
    assert count == (len(list(default_migrations_dir().glob("*.sql"))),)


def test_a_changed_applied_migration_refuses_to_start(tmp_path: Path, migrations: Path) -> None:
    open_database(str(tmp_path / "a.db"), migrations).close()
    first = sorted(migrations.glob("*.sql"))[0]
    first.write_text(first.read_text() + "\n-- edited after release\n")
    with pytest.raises(SchemaMismatchError, match="changed"):
        open_database(str(tmp_path / "a.db"), migrations)


def test_a_database_newer_than_the_code_refuses_to_start(tmp_path: Path, migrations: Path) -> None:
    extra = migrations / f"{len(list(migrations.glob('*.sql'))) + 1:04d}-future.sql"
    extra.write_text("CREATE TABLE future_thing (x INTEGER);\n")
    open_database(str(tmp_path / "a.db"), migrations).close()
    extra.unlink()
    with pytest.raises(SchemaMismatchError, match="newer"):
        open_database(str(tmp_path / "a.db"), migrations)


def test_a_failing_migration_leaves_no_trace(tmp_path: Path, migrations: Path) -> None:
    extra = migrations / f"{len(list(migrations.glob('*.sql'))) + 1:04d}-broken.sql"
    extra.write_text("CREATE TABLE half (x INTEGER);\nINSERT INTO nope VALUES (1);\n")
    with pytest.raises(Exception, match="no such table"):
        open_database(str(tmp_path / "a.db"), migrations)
    conn = sqlite3.connect(str(tmp_path / "a.db"))
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "half" not in names
    assert "tasks" in names  # the earlier migrations committed on their own


def test_a_gap_in_migration_numbers_is_refused(tmp_path: Path, migrations: Path) -> None:
    gap = len(list(migrations.glob("*.sql"))) + 2
    (migrations / f"{gap:04d}-gap.sql").write_text("SELECT 1;\n")
    with pytest.raises(SchemaMismatchError, match="numbered"):
        open_database(str(tmp_path / "a.db"), migrations)
