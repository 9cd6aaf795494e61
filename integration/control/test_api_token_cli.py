"""``ql3 control token ...`` through the real binary as the schema owner (docs/protocols.md §4.5):
the token is printed once, works against the API as the runtime role, is never listed,
is refused after revoke; import by hash; a named pool is created when missing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from api_world import ApiWorld

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")


def ql3(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([QL3, "control", "token", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_create_list_revoke_through_the_binary(api: ApiWorld) -> None:
    url = api.pg_db.url
    made = json.loads(ql3("create", "--database-url", url, "--name", "ops", "--scope",
                          "operator", "--json").stdout)
    headers = {"Authorization": f"Bearer {made['token']}"}
    assert api.client.get("/v1/runs", headers=headers).status_code == 200
    listed = ql3("list", "--database-url", url).stdout
    assert made["id"] in listed and made["token"] not in listed
    ql3("revoke", "--database-url", url, made["id"])
    assert api.client.get("/v1/runs", headers=headers).status_code == 401
    again = ql3("revoke", "--database-url", url, made["id"], check=False)
    assert again.returncode == 1


def test_import_by_hash_and_a_worker_pool_created_when_missing(api: ApiWorld) -> None:
    url = api.pg_db.url
    secret = "ql3_" + "k" * 43  # the value a Kubernetes Secret would hold
    digest = hashlib.sha256(secret.encode()).hexdigest()
    out = ql3("import", "--database-url", url, "--name", "k8s", "--scope", "worker",
              "--pool", "gpu", "--pool-labels", "zone=a,gpu=yes", "--sha256", digest)
    assert secret not in out.stdout + out.stderr
    assert api.sql("SELECT labels FROM worker_pools WHERE name = 'gpu'") == [
        ({"zone": "a", "gpu": "yes"},)]
    worker = {"Authorization": f"Bearer {secret}"}
    assert api.client.get("/v1/tasks", headers=worker).status_code == 403  # worker only
    clash = ql3("create", "--database-url", url, "--name", "w2", "--scope", "worker",
                "--pool", "gpu", "--pool-labels", "zone=b", check=False)
    assert clash.returncode == 2 and "other labels" in clash.stderr
    bad = ql3("create", "--database-url", url, "--name", "x", "--scope", "viewer",
              "--pool", "gpu", check=False)
    assert bad.returncode == 2
