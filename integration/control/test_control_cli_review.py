"""Edge cases of the offline --database-url checks and of migrate's refusal, found in review:
odd port values exit 2 without a traceback, URLs that connect are never refused offline
(libpq's and psycopg's own parsing rules, not stricter ones), and a refusal names the
environment variable a URL came from."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from pg_control_db import PgDb, admin, drop_role, unique

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")
SECRET = "Sup3rS3cret"


def _ql3(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([QL3, "control", *args], capture_output=True, text=True, timeout=60,
                         check=False, env=env)
    assert "Traceback" not in out.stderr, out.stderr
    assert SECRET not in out.stdout + out.stderr
    return out


@pytest.mark.parametrize("query", [
    "port=%C2%B2",    # '²': str.isdigit() is True, int() raises ValueError
    "port=5432%1C",   # str.strip() removes \x1c, int() of the unstripped value raises
])
def test_an_odd_port_value_exits_2_without_a_traceback(query: str) -> None:
    """A non-ASCII digit or a trailing control character: exit 2, one line."""
    out = _ql3("readiness", "--database-url",
               f"postgresql://postgres:{SECRET}@127.0.0.1:5432/postgres?{query}")
    assert out.returncode == 2 and "invalid port" in out.stderr, out.stderr


@pytest.mark.parametrize("query", [
    "connect_timeout=2.5",  # psycopg reads connect_timeout as int(float(value))
    "connect_timeout=",     # empty: the default (10 s)
    "port=%2B5432",         # libpq's strtol reads "+5432"
])
def test_a_url_that_connected_before_is_not_refused_offline(pg_db: PgDb, query: str) -> None:
    """psycopg reads connect_timeout as int(float(v)) (empty: the default) and libpq's
    strtol reads "+5432": these URLs connect, so the offline check lets them through."""
    sep = "&" if "?" in pg_db.url else "?"
    out = _ql3("readiness", "--database-url", pg_db.url + sep + query,
               "--runtime-role", pg_db.runtime_role)
    assert out.returncode != 2, out.stderr


def test_migrates_refusal_names_the_environment_variable(empty_db: PgDb) -> None:
    """The URL came from QL3_DATABASE_URL, so the refusal names that variable."""
    role = unique("ql3rt")
    with admin() as conn:
        conn.execute(f'CREATE ROLE "{role}" NOLOGIN')
    try:
        url = empty_db.url + "?options=" + urllib.parse.quote(f"-c role={role}")
        env = {k: v for k, v in os.environ.items() if k != "QL3_DATABASE_URL"}
        env["QL3_DATABASE_URL"] = url
        out = _ql3("migrate", env=env)
        assert out.returncode == 2, out.stderr
        assert "QL3_DATABASE_URL: connects as role" in out.stderr, out.stderr
    finally:
        drop_role(role)

