"""``ql3 control`` on bad input and failing services: exit 2 for malformed input before any
connection, exit 1 with one redacted line for a database that fails; never a traceback and
never a password in the output (docs/protocols.md §4.1; ground rules: typed errors, no secrets)."""

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
    ("postgresql://postgres@h1:5499,h2:port/x", "invalid port"),
    ("postgresql://postgres@h1:5499,h2:5432/x?port=1,2,3", "more ports than hosts"),
    ("not a url", "must be a postgresql:// URL"),
    ("POSTGRESQL://postgres@127.0.0.1/x", "must be a postgresql:// URL"),
    (f"postgresql://postgres:Tr0ub4dor@{SECRET}@127.0.0.1/x", "percent-encode it as %40"),
    (f"postgresql://postgres:{SECRET}\udcff@127.0.0.1/x", "not UTF-8"),
    (f"postgresql://x:{SECRET}@[::1/db", "is not a valid URL"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1:5432/x?foo=bar",
     "has an unknown query parameter 'foo'"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1:5432/x?sslmode=bogus", "invalid sslmode (one of"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1/x?connect_timeout=abc",
     "connect_timeout that is not a number of seconds"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1/x?keepalives=99999999999",
     "keepalives that is not an integer"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1/x?port=%D9%A5%D9%A4", "invalid port"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1/x?port=%20", "invalid port"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1/x?port=5432,5433", "more ports than hosts"),
    (f"postgresql://postgres:{SECRET}%FF@127.0.0.1/x", "not UTF-8"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1/x?target_session_attrs=any&gssencmode=x",
     "invalid gssencmode"),
    (f"postgresql://postgres:{SECRET}@127.0.0.1/x?host=a,b&port=5432,70000", "invalid port"),
])
@pytest.mark.parametrize("command", [["readiness"], ["migrate"], ["retention", "status"]])
def test_a_malformed_database_url_exits_2_without_echoing_it(
        command: list[str], url: str, says: str) -> None:
    out = _ql3(*command, "--database-url", url)
    assert out.returncode == 2 and says in out.stderr, out.stderr


@pytest.mark.parametrize(("url", "says"), [
    (f"postgresql://postgres:{SECRET}@127.0.0.1:1/x", "database: "),
    (db_url("ql3_no_such_db_zz"), 'database "ql3_no_such_db_zz" does not exist'),
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
    (["--log-bucket", "ab"], "--log-bucket: is not a bucket name"),
    (["--log-bucket", "b" * 256], "--log-bucket: is not a bucket name"),
    (["--log-bucket", "a..b"], "--log-bucket: is not a bucket name"),
    (["--log-bucket", "192.168.1.10"], "--log-bucket: is not a bucket name"),
    (["--log-bucket", "b12", "--s3-endpoint", f"http://key:{SECRET}@127.0.0.1:9000"],
     "without user-info, query or fragment"),
    (["--log-bucket", "b12", "--s3-endpoint", "http://127.0.0.1:9000/?a=1"],
     "without user-info, query or fragment"),
    (["--log-bucket", "b12", "--s3-endpoint", f"http://key:123/{SECRET}@127.0.0.1:9000"],
     "without user-info, query or fragment"),
    (["--log-bucket", "b12", "--s3-endpoint", "http://exa_mple.com:5055"],
     "--s3-endpoint: is not an endpoint URL botocore accepts"),
    (["--log-bucket", "b12", "--s3-endpoint", "http://127.0.0.1:0"], "has port 0"),
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


@pytest.mark.parametrize(("variables", "says"), [
    ({"QL3_DATABASE_URL": f"mysql://u:{SECRET}@h/db"},
     "QL3_DATABASE_URL: must be a postgresql:// URL"),
    ({"QL3_DATABASE_URL": "postgresql://x@127.0.0.1:1/x", "QL3_LOG_BUCKET": "a..b"},
     "QL3_LOG_BUCKET: is not a bucket name"),
    ({"QL3_DATABASE_URL": "postgresql://x@127.0.0.1:1/x", "QL3_LOG_BUCKET": "b12",
      "QL3_S3_ENDPOINT": f"http://k:{SECRET}@h:1"}, "QL3_S3_ENDPOINT: must be http(s)://"),
])
def test_a_bad_value_from_the_environment_is_reported_under_its_variable(
        variables: dict[str, str], says: str) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("QL3_")} | variables
    out = subprocess.run([QL3, "control", "readiness"], capture_output=True, text=True,
                         timeout=60, check=False, env=env)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr, out.stderr
    assert "--" not in out.stderr and SECRET not in out.stderr + out.stdout


def test_migrate_with_a_role_that_cannot_create_names_it_and_changes_nothing(
        empty_db: PgDb) -> None:
    """The runtime role's URL given to migrate: exit 2 naming the role, not the server's
    "permission denied for schema public"; nothing is created."""
    import urllib.parse

    role = unique("ql3rt")
    with admin() as conn:
        conn.execute(f'CREATE ROLE "{role}" NOLOGIN')
    try:
        url = empty_db.url + "?options=" + urllib.parse.quote(f"-c role={role}")
        out = _ql3("migrate", "--database-url", url)
        assert out.returncode == 2, out.stderr
        assert f"connects as role '{role}',\n  which cannot create objects" in out.stderr
        assert "migration owner" in out.stderr
        with empty_db.connect() as conn:
            assert conn.execute("SELECT to_regclass('ql3_migration_ledger')").fetchone() == (
                None,)
    finally:
        drop_role(role)


def test_several_hosts_in_the_url_are_accepted_as_libpq_reads_them(pg_db: PgDb) -> None:
    """postgresql://u@h1:p1,h2:p2/db (a failover pair): libpq tries the hosts in turn."""
    url = pg_db.url.replace("@127.0.0.1:5432/", "@127.0.0.1:1,127.0.0.1:5432/", 1)
    assert url != pg_db.url
    out = _ql3("readiness", "--database-url", url, "--runtime-role", pg_db.runtime_role)
    assert out.returncode == 0 and "ready" in out.stdout, out.stdout + out.stderr


def test_an_endpoint_from_the_environment_alone_does_not_stop_a_database_check(
        pg_db: PgDb) -> None:
    """QL3_S3_ENDPOINT set for the service but no bucket: readiness checks the database."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("QL3_")}
    env["QL3_S3_ENDPOINT"] = "http://127.0.0.1:1"
    out = subprocess.run([QL3, "control", "readiness", "--database-url", pg_db.url,
                          "--runtime-role", pg_db.runtime_role], capture_output=True,
                         text=True, timeout=60, check=False, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "ready", out.stdout + out.stderr


def test_a_missing_control_extra_says_how_to_install_it() -> None:
    """Without psycopg (as after scripts/demo.sh, which has no cluster): exit 2, one line."""
    code = ("import sys; sys.modules['psycopg'] = None; "
            "from qinglong.local.app.cli import run_main; "
            "sys.exit(run_main(['control', 'readiness', '--database-url', "
            "'postgresql://x@127.0.0.1:1/x']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 2, out.stderr
    assert "needs the 'control' extra" in out.stderr and "install `qinglong-cluster[control]`" in (
        out.stderr)
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
