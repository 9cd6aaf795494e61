"""``ql3 control retention sweep``: the sweeper as a command, once and until SIGTERM (ADR-0379
§3–§4). Real PostgreSQL (runtime role), moto's server behind our fault proxy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pg_control_db import PgDb
from s3_services import CREDS
from sweep_world import exists, rows, seed_logs

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")
ENV = dict(os.environ, AWS_ACCESS_KEY_ID=CREDS["aws_access_key_id"],
           AWS_SECRET_ACCESS_KEY=CREDS["aws_secret_access_key"], AWS_DEFAULT_REGION="us-east-1")


def _args(pg_db: PgDb, proxy: Any, bucket: str) -> list[str]:
    runtime = pg_db.url + "?options=" + urllib.parse.quote(f"-c role={pg_db.runtime_role}")
    return [QL3, "control", "retention", "sweep", "--database-url", runtime, "--log-bucket",
            bucket, "--s3-endpoint", proxy.endpoint, "--replica-id", "cli-test"]


def _tombstones(pg_db: PgDb) -> dict[str, str]:
    with pg_db.connect() as conn:
        return {str(a): o for a, o in rows(
            conn, "SELECT attempt_id, outcome FROM run_attempt_log_artifact_tombstones")}


def test_sweep_once_retires_due_logs_and_prints_counts(
        pg_db: PgDb, direct_s3: Any, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    with pg_db.connect() as conn:
        logs = seed_logs(conn, direct_s3, bucket, 3)
    out = subprocess.run([*_args(pg_db, proxy, bucket), "--once", "--json"], env=ENV,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["object_store"], report["claimed"], report["counts"]) == (
        "safe", 3, {"deleted": 3})
    assert report["owner"].startswith("cli-test/")
    assert _tombstones(pg_db) == {log.attempt_id: "deleted" for log in logs}
    assert not any(exists(direct_s3, log.identity) for log in logs)
    again = subprocess.run([*_args(pg_db, proxy, bucket), "--once"], env=ENV,
                           capture_output=True, text=True, timeout=60, check=False)
    assert (again.returncode, again.stdout.strip()) == (0, "object store safe; claimed 0")


def test_sweep_runs_until_sigterm_and_drains(
        pg_db: PgDb, direct_s3: Any, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(True)
    with pg_db.connect() as conn:
        logs = seed_logs(conn, direct_s3, bucket, 20)
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
    assert "sweeping as cli-test/" in stdout and "drained" in stdout
    assert set(_tombstones(pg_db).values()) == {"deleted"}
