"""Builders for the legacy import tests: Qinglong 2.x databases from the pinned DDL, their
scripts directory, and the real `ql3` command line."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legacy_schemas import SCHEMAS

QL3 = str(Path(sys.executable).parent / "ql3")
STAMP = "2024-09-13 15:00:00.000 +00:00"
SECRETS = ("secret-one", "secret-two", "tok-secret", "plain-secret")

_CRON_DEFAULTS: dict[str, Any] = {
    "timestamp": "Fri Sep 13 2024 23:00:00 GMT+0800", "saved": 1, "status": 1, "isSystem": 0,
    "pid": None, "isDisabled": 0, "isPinned": 0, "log_path": "", "labels": [],
    "last_running_time": 0, "last_execution_time": 0, "createdAt": STAMP, "updatedAt": STAMP,
}
_ENV_DEFAULTS: dict[str, Any] = {
    "timestamp": "Fri Sep 13 2024 23:00:00 GMT+0800", "status": 0, "position": 4.5e15,
    "remarks": "", "createdAt": STAMP, "updatedAt": STAMP,
}


def cron_rows(version: str) -> list[dict[str, Any]]:
    """The 2.x crons the tests import; rows using newer columns only for newer versions."""
    rows: list[dict[str, Any]] = [
        {"id": 1, "name": "京东签到", "command": "task jd_sign.js", "schedule": "0 5 8 * * *",
         "labels": ["jd", "daily"]},
        {"id": 2, "name": "Boot job", "command": "task boot.sh", "schedule": "@boot"},
        {"id": 3, "name": "manual", "command": "task tools/manual.py", "schedule": "@once"},
        {"id": 4, "name": "disabled", "command": "task off.js", "schedule": "0 0 * * *",
         "isDisabled": 1},
        {"id": 5, "name": "pull repo", "command": "ql repo https://example.invalid/x.git",
         "schedule": "0 */6 * * *"},
        {"id": 6, "name": "timeout", "command": "task slow.py -m 30", "schedule": "*/5 * * * *"},
        {"id": 7, "name": "dup", "command": "task dup_a.js", "schedule": "0 1 * * *"},
        {"id": 8, "name": "dup", "command": "task dup_b.js", "schedule": "0 2 * * *"},
        {"id": 9, "name": "Café Sync!", "command": "task /ql/data/scripts/cafe.ts arg1",
         "schedule": "30 4 * * *"},
        {"id": 10, "name": "conc", "command": "task jd_x.js conc JD_COOKIE 1-3",
         "schedule": "0 0 * * *"},
        {"id": 15, "name": "shell", "command": "echo hi && date", "schedule": "0 3 * * *"},
    ]
    if version != "2.11":
        rows += [
            {"id": 11, "name": "sub", "command": "task sub_a.js", "schedule": "0 9 * * *",
             "sub_id": 3},
            {"id": 12, "name": "multi", "command": "task multi.js", "schedule": "0 8 * * *",
             "extra_schedules": [{"schedule": "0 20 * * *"}, {"schedule": "0 8 * * *"}]},
            {"id": 13, "name": "hooks", "command": "task hook.sh 'a b'",
             "schedule": "0 7 * * *", "task_before": "echo before", "task_after": "echo after"},
        ]
    if version == "2.21":
        rows.append({"id": 14, "name": "multi-inst", "command": "task m.js",
                     "schedule": "0 6 * * *", "allow_multiple_instances": 1,
                     "work_dir": "tools"})
    return sorted(rows, key=lambda r: int(r["id"]))


def env_rows() -> list[dict[str, Any]]:
    """2.x Envs: a duplicated name (joined), a disabled one, an unusable name."""
    return [
        {"id": 1, "name": "JD_COOKIE", "value": "secret-one", "position": 2},
        {"id": 2, "name": "JD_COOKIE", "value": "secret-two", "position": 5,
         "remarks": "账号二"},
        {"id": 3, "name": "TOKEN", "value": "tok-secret", "status": 1},
        {"id": 4, "name": "bad-name", "value": "x"},
        {"id": 5, "name": "PLAIN", "value": "plain-secret"},
    ]


SCRIPTS = ("jd_sign.js", "boot.sh", "tools/manual.py", "slow.py", "dup_a.js", "dup_b.js",
           "cafe.ts", "multi.js", "hook.sh", "m.js")


@dataclass
class LegacyInstall:
    """A 2.x data directory: ``data/db/database.sqlite`` and ``data/scripts``."""

    root: Path

    @property
    def db(self) -> Path:
        return self.root / "data" / "db" / "database.sqlite"

    @property
    def scripts(self) -> Path:
        return self.root / "data" / "scripts"

    def digest(self) -> str:
        """SHA-256 of the database file."""
        return hashlib.sha256(self.db.read_bytes()).hexdigest()

    def db_dir_listing(self) -> list[str]:
        return sorted(os.listdir(self.db.parent))


def build_install(
    root: Path,
    version: str,
    crons: list[dict[str, Any]] | None = None,
    envs: list[dict[str, Any]] | None = None,
    scripts: dict[str, str] | None = None,
) -> LegacyInstall:
    """Create a 2.x install under ``root`` from the pinned DDL of ``version``."""
    install = LegacyInstall(root)
    install.db.parent.mkdir(parents=True)
    install.scripts.mkdir(parents=True)
    for name, body in (scripts or dict.fromkeys(SCRIPTS, "")).items():
        path = install.scripts / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    conn = sqlite3.connect(install.db)
    try:
        for statement in SCHEMAS[version]:
            conn.execute(statement)
        _insert(conn, "Crontabs", _CRON_DEFAULTS, cron_rows(version) if crons is None else crons)
        _insert(conn, "Envs", _ENV_DEFAULTS, env_rows() if envs is None else envs)
        conn.commit()
    finally:
        conn.close()
    return install


def _insert(
    conn: sqlite3.Connection, table: str, defaults: dict[str, Any], rows: list[dict[str, Any]]
) -> None:
    present = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    for row in rows:
        data = {**defaults, **row}
        missing = set(data) - present
        assert not missing - set(defaults), f"{table} of this version lacks {missing}"
        cols = [c for c in data if c in present]
        values = [json.dumps(data[c], ensure_ascii=False) if isinstance(data[c], list | dict)
                  else data[c] for c in cols]
        conn.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
            values,
        )


class Ql3Cli:
    """The real `ql3` against one data directory (QL3_DATA_DIR); records every output."""

    def __init__(self, data_dir: Path) -> None:
        self.env = dict(os.environ, QL3_DATA_DIR=str(data_dir))
        self.env.pop("PYTHONPATH", None)
        self.outputs: list[str] = []

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([QL3, "local", *args], env=self.env, capture_output=True,
                              text=True, timeout=60, check=False)
        self.outputs += [proc.stdout, proc.stderr]
        if check and proc.returncode != 0:
            raise AssertionError(f"ql3 local {args} exited {proc.returncode}: {proc.stderr}")
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)
