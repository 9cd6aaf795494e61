"""``ql3 control readiness --log-bucket``: the object store as a readiness capability
(docs/protocols.md §4.1, §4.3; case C08). Real PostgreSQL, moto's server, our fault proxy."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pg_control_db import PgDb
from s3_services import aws_env, free_port

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")
ENV = aws_env()


def _readiness(pg_db: PgDb, endpoint: str, bucket: str, *extra: str
               ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [QL3, "control", "readiness", "--database-url", pg_db.url, "--runtime-role",
         pg_db.runtime_role, "--log-bucket", bucket, "--s3-endpoint", endpoint, *extra],
        capture_output=True, text=True, timeout=60, check=False, env=ENV)


def test_a_safe_store_is_ready_without_degradation(
        pg_db: PgDb, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    out = _readiness(pg_db, proxy.endpoint, make_bucket(False), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"ready": True, "reason": None, "detail": None,
                                      "degraded": [], "schema_ahead_by": []}
    assert len(proxy.deletes()) == 2  # the wrong If-Match (412), then the canary's cleanup


def test_a_store_that_ignores_if_match_is_ready_but_degraded(
        pg_db: PgDb, proxy: Any, make_bucket: Callable[[bool], str]) -> None:
    proxy.set(strip_if_match=True)
    bucket = make_bucket(False)
    out = _readiness(pg_db, proxy.endpoint, bucket, "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["degraded"] == [
        {"capability": "object_store", "reason": "object_store_unsafe",
         "detail": "DELETE with a wrong If-Match succeeded"}]
    text = _readiness(pg_db, proxy.endpoint, bucket)
    assert (text.returncode, text.stdout.strip()) == (0, "ready; degraded: object_store "
                                                         "(object_store_unsafe: DELETE with a"
                                                         " wrong If-Match succeeded)")


@pytest.mark.parametrize("broken", ["5xx", "refused"])
def test_an_unreachable_store_is_not_ready(
        pg_db: PgDb, proxy: Any, make_bucket: Callable[[bool], str], broken: str) -> None:
    endpoint = proxy.endpoint
    if broken == "5xx":
        proxy.set(fail={"PUT": 503})
    else:
        endpoint = f"http://127.0.0.1:{free_port()}"
    out = _readiness(pg_db, endpoint, make_bucket(False), "--json")
    assert out.returncode == 1
    verdict = json.loads(out.stdout)
    assert (verdict["ready"], verdict["reason"]) == (False, "object_store_unavailable")
    assert "object_store_unavailable" in out.stderr and "testing" not in out.stderr
