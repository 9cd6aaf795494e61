"""``ql3 control migrate`` at COLUMNS=80 through the real binary on a fresh PostgreSQL
database: every line it prints — the files applied, the second run that applies none, and
the refusal of a login that is not the schema owner — fits 80 screen columns (East Asian
wide characters count 2; docs/operations.md, every line the CLI prints fits 80 columns)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pg_control_db import PgDb

from qinglong.control.db.migrations import EXPECTED_MIGRATION_COUNT
from qinglong.shared.display import text_width

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")


def migrate(*args: str, code: int) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QL3_")}
    env["COLUMNS"] = "80"
    out = subprocess.run([QL3, "control", "migrate", *args], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == code, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = (out.stdout + out.stderr).splitlines()
    wide = [(text_width(line), line) for line in lines if text_width(line) > 80]
    assert not wide, wide
    return lines


def test_every_line_of_control_migrate_fits_80_columns(empty_db: PgDb) -> None:
    args = ["--database-url", empty_db.url, "--runtime-role", empty_db.runtime_role]
    first = migrate(*args, code=0)
    assert first[0] == f"applied {EXPECTED_MIGRATION_COUNT} migration(s):", first
    assert len(first) == 1 + EXPECTED_MIGRATION_COUNT  # one line a file
    assert migrate(*args, code=0) == ["applied 0 migration(s)"]
    # the runtime role's login cannot create in public: refused in a clear line or two
    refused = migrate("--database-url", empty_db.runtime_url, "--runtime-role",
                      empty_db.runtime_role, code=2)
    assert any("migration owner" in line for line in refused), refused
