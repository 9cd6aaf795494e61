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


def repo_names(db: object) -> list[str]:
    from qinglong.local.storage.repository import LocalRunRepository

    repo = LocalRunRepository(db)  # type: ignore[arg-type]
    return [repo.get_task(n).name for n in ("Backup", "backup")]


def test_the_name_key_migration_keeps_names_that_differ_only_in_case(
    tmp_path: Path, migrations: Path,
) -> None:
    """0007 (task names as people write them): existing rows get ``lower(name)`` as key; two
    live names that differ only in case both stay (the older keeps the lowered key); after
    it, a name equal under NFKC case-folding to a live one is refused."""
    from qinglong.local.storage.repository import LocalRunRepository
    from qinglong.shared.domain import Task
    from qinglong.shared.errors import ConflictError
    from qinglong.shared.ids import uuid7

    held = {f: f.read_text() for f in sorted(migrations.glob("*.sql"))
            if int(f.name[:4]) >= 7}  # 0007 and every later one: the database before 0007
    for f in held:
        f.unlink()
    db = open_database(str(tmp_path / "a.db"), migrations)
    rows = [("Backup", 1, None), ("backup", 2, None), ("Sync", 3, 5)]
    db.write(lambda c: c.executemany(
        "INSERT INTO tasks (id, name, argv_json, schedule, timezone, created_at_ms,"
        " updated_at_ms, deleted_at_ms) VALUES (?, ?, '[\"true\"]', '@once', 'UTC', ?, ?, ?)",
        [(uuid7(), name, at, at, gone) for name, at, gone in rows]))
    db.close()
    for f, text in held.items():
        f.write_text(text)
    db = open_database(str(tmp_path / "a.db"), migrations)
    keys = dict(db.read(lambda c: c.execute("SELECT name, name_key FROM tasks").fetchall()))
    assert keys["Backup"] == "backup" and keys["Sync"] == "sync"
    assert keys["backup"].startswith("backup/")  # the younger of the two: its own key
    assert repo_names(db) == ["Backup", "backup"]
    repo = LocalRunRepository(db)
    with pytest.raises(ConflictError):
        repo.create_task(Task(id=uuid7(), name="BACKUP", argv=("true",), schedule="@once",
                              timezone="UTC"))
    repo.create_task(Task(id=uuid7(), name="签到1", argv=("true",), schedule="@once",
                          timezone="UTC"))
    with pytest.raises(ConflictError):
        repo.create_task(Task(id=uuid7(), name="签到１", argv=("true",), schedule="@once",
                              timezone="UTC"))
    db.close()
