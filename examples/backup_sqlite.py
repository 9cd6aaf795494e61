#!/usr/bin/env python3
"""Online backup of a SQLite database, verified before it is kept.

Usage: backup_sqlite.py SRC_DB DEST_DIR

Copies SRC_DB with SQLite's online backup API (safe while other processes use the database)
to ``DEST_DIR/<name>-<UTC timestamp>.sqlite``. The source is opened with ``query_only`` (no
statement can write to it) and the copy is taken inside one read transaction, so the row
counts compared below come from the same snapshot as the copy. The copy is written under a
temporary name and switched to ``journal_mode=DELETE`` (one self-contained file, even when the
source uses WAL), then checked: ``PRAGMA integrity_check`` must answer ``ok`` and every table
must have as many rows as in the source. Only then is it fsynced and linked to its final name
(never over an existing file).

DEST_DIR is created (mode 0700) if missing. Prints the result; exit 0 on success, 1 on any
failure (the partial copy is removed), 2 for bad arguments. Stdlib only.
"""

from __future__ import annotations

import datetime as dt
import os
import sqlite3
import sys
from pathlib import Path
from urllib.parse import quote


class BackupError(Exception):
    pass


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def table_counts(conn: sqlite3.Connection) -> dict[str, int]:
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
    counts: dict[str, int] = {}
    for name in names:
        # Identifiers cannot be bound as parameters; the name comes from sqlite_master and
        # is quoted, so this is not an injection point.
        sql = f"SELECT count(*) FROM {quote_ident(name)}"  # noqa: S608
        counts[name] = conn.execute(sql).fetchone()[0]
    return counts


def open_source(src: Path) -> sqlite3.Connection:
    """Open the source so that no statement can write to it.

    ``query_only`` on a read-write handle rather than ``mode=ro`` when we may write the file:
    a read-only handle cannot clean up a WAL database's ``-wal``/``-shm`` files when it is the
    last user, so it would leave them behind next to the source.
    """
    mode = "rw" if os.access(src, os.W_OK) else "ro"
    uri = f"file:{quote(str(src.resolve()))}?mode={mode}"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    conn.execute("PRAGMA query_only = ON")
    return conn


def backup(src: Path, dest_dir: Path) -> tuple[Path, dict[str, int]]:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S%fZ")
    final = dest_dir / f"{src.stem}-{stamp}.sqlite"
    tmp = dest_dir / f".{final.name}.tmp"
    if final.exists() or tmp.exists():
        raise BackupError(f"{final} already exists")

    try:
        source = open_source(src)
        try:
            source.execute("BEGIN")  # one snapshot for both the copy and the counts
            expected = table_counts(source)
            target = sqlite3.connect(tmp)
            try:
                source.backup(target)
            finally:
                target.close()
            source.execute("COMMIT")
        finally:
            source.close()

        copy = sqlite3.connect(tmp, isolation_level=None)
        try:
            # A copy of a WAL database is in WAL mode too; make it one self-contained file.
            copy.execute("PRAGMA journal_mode=DELETE")
            integrity = [row[0] for row in copy.execute("PRAGMA integrity_check")]
            actual = table_counts(copy)
        finally:
            copy.close()
        if integrity != ["ok"]:
            raise BackupError(f"integrity_check: {'; '.join(map(str, integrity))[:500]}")
        if actual != expected:
            raise BackupError(f"row counts differ: source {expected}, copy {actual}")

        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(tmp, final)  # fails if the final name exists: never overwrite
        os.unlink(tmp)
        dir_fd = os.open(dest_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        if tmp.exists():  # any failure: the unverified copy is not kept
            tmp.unlink()
    return final, expected


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {os.path.basename(argv[0])} SRC_DB DEST_DIR", file=sys.stderr)
        return 2
    src, dest_dir = Path(argv[1]), Path(argv[2])
    if not src.is_file():
        print(f"backup FAILED: no such database file: {src}", file=sys.stderr)
        return 2
    try:
        dest_dir.mkdir(mode=0o700, exist_ok=True)
        final, counts = backup(src, dest_dir)
    except (BackupError, sqlite3.Error, OSError) as exc:
        print(f"backup FAILED: {src}: {exc}", file=sys.stderr)
        return 1
    rows = sum(counts.values())
    detail = ", ".join(f"{name}={n}" for name, n in counts.items())
    print(
        f"backup ok: {final} ({final.stat().st_size} bytes, {len(counts)} tables, "
        f"{rows} rows: {detail}; integrity_check ok)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
