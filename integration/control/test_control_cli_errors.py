"""``ql3 control`` on bad input and failing services: exit 2 for malformed input before any
connection, exit 1 with one redacted line for a database that fails; never a traceback and
never a password in the output (DESIGN.md §4.1; ground rules: typed errors, no secrets)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pg_control_db import PgDb, admin, db_url, drop_role, unique

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")
SECRET = "Sup3rS3cret"


def _ql3(*args: str) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([QL3, "control", *args], capture_output=True, text=True, timeout=60,
                         check=False)
    assert "Traceback" not in out.stderr, out.stderr
    assert SECRET not in out.stdout + out.stderr
    return out


@pytest.mark.parametrize(("url", "says"), [
    ("", "is empty"),
    (f"mysql://u:{SECRET}@h/db", "must be a postgresql:// URL"),
    (f"postgresql://postgres:{SECRET}%zz@127.0.0.1:5432/x", "malformed %-escape"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1:notaport/x", "invalid port"),
    (f"postgresql://postgres:{SECRET}/x@127.0.0.1:5432/x", "percent-encode @ : / ?"),
    ("postgresql://postgres@h1:5499,h2:5432/x", "for several hosts use ?host="),
    ("not a url", "must be a postgresql:// URL"),
    (f"postgresql://x:{SECRET}@[::1/db", "is not a valid URL"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1:5432/x?foo=bar",
     "has an unknown query parameter 'foo'"),
])
@pytest.mark.parametrize("command", [["readiness"], ["migrate"], ["retention", "status"]])
def test_a_malformed_database_url_exits_2_without_echoing_it(
        command: list[str], url: str, says: str) -> None:
    out = _ql3(*command, "--database-url", url)
    assert out.returncode == 2 and says in out.stderr, out.stderr


@pytest.mark.parametrize(("url", "says"), [
    (f"postgresql://postgres:{SECRET}@127.0.0.1:1/x", "database: "),
    (db_url("ql3_no_such_db_zz"), 'database "ql3_no_such_db_zz" does not exist'),
    (f"postgresql://postgres:{SECRET}@127.0.0.1:5432/x?sslmode=bogus", "sslmode"),
])
def test_a_failing_database_is_one_redacted_line_and_exit_1(url: str, says: str) -> None:
    out = _ql3("readiness", "--database-url", url)
    assert out.returncode == 1 and says in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_readiness_json_still_prints_a_verdict_when_the_database_is_down() -> None:
    import json

    out = _ql3("readiness", "--database-url", f"postgresql://postgres:{SECRET}@127.0.0.1:1/x",
               "--json")
    assert out.returncode == 1
    verdict = json.loads(out.stdout)
    assert (verdict["ready"], verdict["reason"]) == (False, "database_unavailable")


def test_retention_commands_before_migrate_say_to_migrate(empty_db: PgDb) -> None:
    for command in (["retention", "status"], ["retention", "retry", "0" * 8 + "-0000-7000-8000-"
                                                                  + "0" * 12]):
        out = _ql3(*command, "--database-url", empty_db.url)
        assert out.returncode == 1, out.stderr
        assert "migration_pending" in out.stderr and "ql3 control migrate" in out.stderr


def test_retry_checks_every_id_before_connecting() -> None:
    good = "01890a5d-ac96-774b-bcce-b302099a8057"
    out = _ql3("retention", "retry", "--database-url", "postgresql://x@127.0.0.1:1/x",
               good, "not-a-uuid")
    assert out.returncode == 2 and "argument 2 is not a UUIDv7" in out.stderr, out.stderr


def test_readiness_rejects_an_endpoint_without_a_bucket(pg_db: PgDb) -> None:
    out = _ql3("readiness", "--database-url", pg_db.url, "--s3-endpoint", "http://h:1")
    assert out.returncode == 2 and "needs --log-bucket" in out.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--log-bucket", ""], "--log-bucket: is empty"),
    (["--log-bucket", "Bad_Bucket!"], "--log-bucket: is not a bucket name"),
    (["--runtime-role", "Bad-Name"], "lowercase identifier"),
    (["--log-bucket", "b12", "--s3-endpoint", "http://127.0.0.1:99999"], "--s3-endpoint"),
    (["--log-bucket", "b12", "--s3-endpoint", "http://[::1"], "--s3-endpoint"),
])
def test_readiness_rejects_bad_options_with_exit_2(args: list[str], says: str) -> None:
    out = _ql3("readiness", "--database-url", "postgresql://x@127.0.0.1:1/x", *args)
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_migrate_refuses_the_owner_or_a_superuser_as_runtime_role(empty_db: PgDb) -> None:
    out = _ql3("migrate", "--database-url", empty_db.url, "--runtime-role", "postgres")
    assert out.returncode == 2 and "is the role running the migration" in out.stderr
    owner = unique("ql3own")
    with admin() as conn:
        conn.execute(f'CREATE ROLE "{owner}" NOLOGIN')
    try:
        with empty_db.connect() as conn:
            conn.execute(f'CREATE TABLE owned (x int); ALTER TABLE owned OWNER TO "{owner}"')
        out = _ql3("migrate", "--database-url", empty_db.url, "--runtime-role", owner)
        assert out.returncode == 2 and "owns objects in schema public" in out.stderr
        with empty_db.connect() as conn:  # nothing was applied or revoked
            assert conn.execute("SELECT to_regclass('ql3_migration_ledger')").fetchone() == (
                None,)
    finally:
        with empty_db.connect() as conn:
            conn.execute("DROP TABLE owned")
        drop_role(owner)
    bad = _ql3("migrate", "--database-url", empty_db.url, "--runtime-role", 'x"; select 1')
    assert bad.returncode == 2 and "lowercase identifier" in bad.stderr
