"""``ql3 control retention sweep``: the sweeper as a command, once and until SIGTERM (ADR-0379
§3–§4). Real PostgreSQL (runtime role), moto's server behind our fault proxy."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_control_db import PgDb, admin, drop_role, unique
from s3_services import aws_env
from sweep_world import exists, rows, seed_logs

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")
ENV = aws_env()


_LOGINS: list[str] = []  # sweeper logins made by this module's tests, dropped after each


@pytest.fixture(autouse=True)
def _drop_sweeper_logins() -> Iterator[None]:
    yield
    while _LOGINS:
        drop_role(_LOGINS.pop())


def _sweeper_url(pg_db: PgDb) -> str:
    """A login that is a member of the runtime role and nothing more (what README says)."""
    name = pg_db.runtime_role + "_in"
    if name not in _LOGINS:
        with admin() as conn:
            conn.execute(f'CREATE ROLE "{name}" LOGIN IN ROLE "{pg_db.runtime_role}"')
        _LOGINS.append(name)
    return f"postgresql://{name}@127.0.0.1:5432/{pg_db.name}"


def _args(pg_db: PgDb, proxy: Any, bucket: str, *, as_owner: bool = False) -> list[str]:
    runtime = pg_db.url if as_owner else _sweeper_url(pg_db)
    return [QL3, "control", "retention", "sweep", "--database-url", runtime, "--log-bucket",
            bucket, "--s3-endpoint", proxy.endpoint, "--replica-id", "cli-test"]


def _sweep(pg_db: PgDb, proxy: Any, bucket: str, *extra: str,
           as_owner: bool = False) -> subprocess.CompletedProcess[str]:
    """``ql3 control retention sweep`` to completion (``--once`` runs), output captured."""
    return subprocess.run([*_args(pg_db, proxy, bucket, as_owner=as_owner), *extra], env=ENV,
                          capture_output=True, text=True, timeout=60, check=False)


def _tombstones(pg_db: PgDb) -> dict[str, str]:
    with pg_db.connect() as conn:
        return {str(a): o for a, o in rows(
            conn, "SELECT attempt_id, outcome FROM run_attempt_log_artifact_tombstones")}


def test_sweep_once_retires_due_logs_and_prints_counts(
        pg_db: PgDb, direct_s3: Any, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    with pg_db.sa() as sa:
        logs = seed_logs(sa, direct_s3, bucket, 3)
    out = _sweep(pg_db, proxy, bucket, "--once", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["object_store"], report["claimed"], report["counts"]) == (
        "safe", 3, {"deleted": 3})
    assert report["owner"].startswith("cli-test/")
    assert _tombstones(pg_db) == {log.attempt_id: "deleted" for log in logs}
    assert not any(exists(direct_s3, log.identity) for log in logs)
    again = _sweep(pg_db, proxy, bucket, "--once")
    assert (again.returncode, again.stdout.strip()) == (0, "object store safe; claimed 0")


def test_sweep_runs_until_sigterm_and_drains(
        pg_db: PgDb, direct_s3: Any, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(True)
    with pg_db.sa() as sa:
        logs = seed_logs(sa, direct_s3, bucket, 20)
    proc = subprocess.Popen([*_args(pg_db, proxy, bucket), "--claims", "4",
                             "--interval-s", "0.05"], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(_tombstones(pg_db)) < len(logs):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "not retired within 60 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("sweeping as cli-test/") and lines[0].endswith("store safe")
    assert lines[-1].startswith("stopped: any sweep in flight finished its current row")
    assert sum(int(line.split("deleted=")[1]) for line in lines[1:-1]) == len(logs)
    assert set(_tombstones(pg_db).values()) == {"deleted"}


def test_sweep_refuses_an_unmigrated_database_and_an_unavailable_store(
        empty_db: PgDb, pg_db: PgDb, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    before = _sweep(empty_db, proxy, bucket, "--once", as_owner=True)
    assert before.returncode == 1 and before.stdout == ""
    assert before.stderr.strip().endswith("(run `ql3 control migrate`)"), before.stderr
    assert "migration_pending" in before.stderr and "Traceback" not in before.stderr
    proxy.set(fail={"PUT": 503})
    down = _sweep(pg_db, proxy, bucket, "--once", "--json")
    assert down.returncode == 1, down.stderr
    report = json.loads(down.stdout)
    assert (report["object_store"], report["claimed"], report["counts"]) == (
        "unavailable", 0, {"object_store_unavailable": 1})
    assert "object store unavailable: canary PUT failed: HTTP 503" in down.stderr
    assert down.stderr.count("canary PUT failed") == 1  # said once, not also by the log


def test_sweep_refuses_a_superuser_or_the_schema_owner(
        pg_db: PgDb, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    superuser = _sweep(pg_db, proxy, bucket, "--once", as_owner=True)  # user postgres
    assert superuser.returncode == 2 and superuser.stdout == "", superuser.stderr
    assert "logs in or acts as a superuser; use a login that is a member" in superuser.stderr
    # a superuser login that only SETs ROLE to the runtime role could RESET ROLE: refused
    set_role = pg_db.url + "?options=" + urllib.parse.quote(f"-c role={pg_db.runtime_role}")
    out = subprocess.run([QL3, "control", "retention", "sweep", "--database-url", set_role,
                          "--log-bucket", bucket, "--s3-endpoint", proxy.endpoint, "--once"],
                         env=ENV, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2 and "as a superuser" in out.stderr, out.stderr
    owner = unique("ql3owner")
    with admin() as conn:
        conn.execute(f'CREATE ROLE "{owner}" LOGIN')
    try:
        with pg_db.connect() as conn:  # a non-superuser owner of the migrated schema
            for (table,) in conn.execute("SELECT tablename FROM pg_tables"
                                         " WHERE schemaname = 'public'").fetchall():
                conn.execute(f'ALTER TABLE "{table}" OWNER TO "{owner}"')
        url = f"postgresql://{owner}@127.0.0.1:5432/{pg_db.name}"
        out = subprocess.run([QL3, "control", "retention", "sweep", "--database-url", url,
                              "--log-bucket", bucket, "--s3-endpoint", proxy.endpoint,
                              "--once"], env=ENV, capture_output=True, text=True, timeout=60,
                             check=False)
        assert out.returncode == 2, out.stderr
        assert "acts as the owner of the schema" in out.stderr
    finally:
        with pg_db.connect() as conn:
            conn.execute(f'REASSIGN OWNED BY "{owner}" TO postgres')
        drop_role(owner)


@pytest.mark.parametrize(("args", "field"), [
    (["--interval-s", "inf"], "--interval-s"), (["--log-bucket", " "], "--log-bucket"),
    (["--replica-id", ""], "--replica-id"), (["--s3-endpoint", "not-a-url"], "--s3-endpoint"),
    (["--replica-id", "a\nb"], "replica_id"), (["--log-bucket", "a/b"], "--log-bucket"),
])
def test_sweep_rejects_bad_options_before_connecting(
        args: list[str], field: str) -> None:
    base = [QL3, "control", "retention", "sweep", "--database-url",
            "postgresql://nobody:pw@127.0.0.1:1/none", "--log-bucket", "bkt", "--once"]
    out = subprocess.run([*base, *args], env=ENV, capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 2, out.stderr
    assert field in out.stderr and "Traceback" not in out.stderr
