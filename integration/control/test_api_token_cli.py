"""``ql3 control token ...`` through the real binary as the schema owner (docs/protocols.md §4.5):
the token is printed once, works against the API as the runtime role, is never listed,
is refused after revoke; import by hash; a named pool is created when missing."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from api_world import ApiWorld

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
QL3 = str(Path(sys.executable).parent / "ql3")


def ql3(*args: str, check: bool = True, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith("QL3_")}
    env.update(extra_env)
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
    assert again.returncode == 2  # an unknown or revoked id names what was asked (usage)


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


def test_the_runtime_login_from_the_environment_cannot_issue_or_revoke_tokens(
        api: ApiWorld) -> None:
    """QL3_DATABASE_URL holding the replicas' runtime login (it may read and insert
    api_tokens): create, import and revoke exit 2 naming QL3_DATABASE_URL and the schema
    owner, and record nothing; list still works for it."""
    runtime = {"QL3_DATABASE_URL": api.pg_db.runtime_url}
    digest = hashlib.sha256(b"ql3_" + b"i" * 43).hexdigest()
    made = json.loads(ql3("create", "--database-url", api.pg_db.url, "--name", "keep",
                          "--scope", "viewer", "--json").stdout)
    before = api.sql("SELECT count(*) FROM api_tokens")
    for args in (("create", "--name", "minted", "--scope", "admin"),
                 ("import", "--name", "imported", "--scope", "viewer", "--sha256", digest),
                 ("revoke", made["id"])):
        out = ql3(*args, check=False, **runtime)
        assert out.returncode == 2, (args, out.returncode, out.stderr)
        assert "QL3_DATABASE_URL: connects as role" in out.stderr, out.stderr
        assert "cannot create objects in schema public:\n  issue and revoke tokens with " \
               "the migration owner's URL" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    assert api.sql("SELECT count(*) FROM api_tokens") == before
    assert api.sql("SELECT revoked_at FROM api_tokens WHERE id = %(id)s",
                   {"id": made["id"]}) == [(None,)]
    listed = ql3("list", check=True, **runtime).stdout
    assert made["id"] in listed


def test_a_live_token_name_is_unique_until_revoked(api: ApiWorld) -> None:
    """A second live ``ops`` token is refused by the CLI (exit 2) and the API (409
    ``token_name_taken``, the name not echoed); once the first is revoked the name is free
    again."""
    url = api.pg_db.url
    first = json.loads(ql3("create", "--database-url", url, "--name", "ops", "--scope",
                           "operator", "--json").stdout)
    again = ql3("create", "--database-url", url, "--name", "ops", "--scope", "viewer",
                check=False)
    assert again.returncode == 2, again.stderr
    assert "--name: a live token already has this name" in again.stderr
    digest = hashlib.sha256(b"ql3_" + b"d" * 43).hexdigest()
    imported = ql3("import", "--database-url", url, "--name", "ops", "--scope", "viewer",
                   "--sha256", digest, check=False)
    assert imported.returncode == 2, imported.stderr
    posted = api.client.post("/v1/tokens", json={"name": "ops", "scope": "viewer"},
                             headers=api.as_("admin"))
    assert posted.status_code == 409, posted.text
    assert posted.json()["error"]["code"] == "token_name_taken"
    assert "ops" not in posted.json()["error"]["message"]
    assert api.sql("SELECT count(*) FROM api_tokens WHERE name = 'ops'") == [(1,)]
    ql3("revoke", "--database-url", url, first["id"])
    ql3("create", "--database-url", url, "--name", "ops", "--scope", "viewer")
    posted = api.client.post("/v1/tokens", json={"name": "ops", "scope": "viewer"},
                             headers=api.as_("admin"))
    assert posted.status_code == 409  # the new live one holds it now
    assert api.sql("SELECT count(*) FROM api_tokens WHERE name = 'ops'") == [(2,)]


def test_import_from_a_token_file_is_hashed_here_and_never_printed(
        api: ApiWorld, tmp_path: Path) -> None:
    """``--token-file`` (a mounted Secret holding the token): the token authenticates
    afterwards, and neither it nor its hash appears in the output; a file that does not
    hold a token's shape is refused (exit 2) before any connection, without echoing it."""
    url = api.pg_db.url
    secret = "ql3_" + "f" * 43
    path = tmp_path / "token"
    path.write_text(secret + "\n")
    out = ql3("import", "--database-url", url, "--name", "boot", "--scope", "admin",
              "--token-file", str(path), "--json")
    assert json.loads(out.stdout)["outcome"] == "created"
    assert secret not in out.stdout + out.stderr
    assert hashlib.sha256(secret.encode()).hexdigest() not in out.stdout + out.stderr
    got = api.client.get("/v1/tasks", headers={"Authorization": f"Bearer {secret}"})
    assert got.status_code == 200
    path.write_text("not-a-token-at-all")
    bad = ql3("import", "--database-url", "postgresql://nobody@127.0.0.1:1/none", "--name",
              "b2", "--scope", "admin", "--token-file", str(path), check=False)
    assert bad.returncode == 2 and "--token-file: does not hold a ql3 token" in bad.stderr
    assert "not-a-token-at-all" not in bad.stderr
    both = ql3("import", "--database-url", url, "--name", "b3", "--scope", "admin",
               "--token-file", str(path), "--sha256", "0" * 64, check=False)
    assert both.returncode == 2 and "exactly one of" in both.stderr


def test_import_ensure_is_idempotent_and_rotates_a_changed_secret(
        api: ApiWorld, tmp_path: Path) -> None:
    """What the chart's migration Job runs at every install and upgrade: the same Secret
    again changes nothing (same id, outcome unchanged); a rotated Secret revokes the old
    token and records the new one; a hash file (a Secret holding only the hash) works too;
    a revoked token is never revived (exit 1, nothing changed)."""
    url = api.pg_db.url
    first, second = "ql3_" + "a" * 43, "ql3_" + "b" * 43
    path = tmp_path / "token"

    def ensure(*extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return ql3("import", "--database-url", url, "--name", "pool-default", "--scope",
                   "worker", "--pool", "default", "--pool-labels", "zone=a", "--ensure",
                   "--json", *extra, check=check)

    path.write_text(first)
    made = json.loads(ensure("--token-file", str(path)).stdout)
    again = json.loads(ensure("--token-file", str(path)).stdout)
    assert made["outcome"] == "created"
    assert again == {"id": made["id"], "outcome": "unchanged"}
    path.write_text(second)
    rotated = json.loads(ensure("--token-file", str(path)).stdout)
    assert rotated["outcome"] == "replaced" and rotated["id"] != made["id"]
    assert api.sql("SELECT id::text, revoked_at IS NOT NULL FROM api_tokens"
                   " WHERE name = 'pool-default' ORDER BY created_at, id") == [
        (made["id"], True), (rotated["id"], False)]
    hash_file = tmp_path / "sha256"
    hash_file.write_text(hashlib.sha256(second.encode()).hexdigest().upper() + "\n")
    by_hash = json.loads(ensure("--sha256-file", str(hash_file)).stdout)
    assert by_hash == {"id": rotated["id"], "outcome": "unchanged"}
    path.write_text(first)  # rolling back to the revoked token
    revived = ensure("--token-file", str(path), check=False)
    assert revived.returncode == 1 and "never revived" in revived.stderr, revived.stderr
    assert api.sql("SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL"
                   " AND name = 'pool-default'") == [(1,)]
    assert api.sql("SELECT id::text FROM api_tokens WHERE revoked_at IS NULL"
                   " AND name = 'pool-default'") == [(rotated["id"],)]


def test_import_ensure_updates_a_pools_changed_labels(api: ApiWorld, tmp_path: Path) -> None:
    """The chart's migration Job after a pool's labels changed in values: ``--ensure`` sets
    the pool's labels to the given ones and says so in one line on stderr (stdout stays
    the JSON answer); the same labels again say nothing; without ``--ensure`` other labels
    are still refused (exit 2) and nothing changes."""
    url = api.pg_db.url
    path = tmp_path / "token"
    path.write_text("ql3_" + "l" * 43)

    def ensure(labels: str) -> subprocess.CompletedProcess[str]:
        return ql3("import", "--database-url", url, "--name", "pool-gpu", "--scope", "worker",
                   "--pool", "gpu", f"--pool-labels={labels}", "--token-file", str(path),
                   "--ensure", "--json")

    def labels() -> object:
        return api.sql("SELECT labels FROM worker_pools WHERE name = 'gpu'")

    made = ensure("zone=a")
    assert made.stderr == "" and labels() == [({"zone": "a"},)]
    moved = ensure("zone=b,gpu=yes")
    assert json.loads(moved.stdout) == {"id": json.loads(made.stdout)["id"],
                                        "outcome": "unchanged"}
    assert moved.stderr == "pool gpu: labels changed from zone=a to gpu=yes,zone=b\n"
    assert labels() == [({"zone": "b", "gpu": "yes"},)]
    assert ensure("gpu=yes,zone=b").stderr == ""
    cleared = ensure("")
    assert cleared.stderr == "pool gpu: labels changed from gpu=yes,zone=b to (none)\n"
    assert labels() == [({},)]
    refused = ql3("import", "--database-url", url, "--name", "pool-gpu-2", "--scope",
                  "worker", "--pool", "gpu", "--pool-labels", "zone=c", "--sha256",
                  "0" * 64, check=False)
    assert refused.returncode == 2 and "other labels" in refused.stderr, refused.stderr
    assert labels() == [({},)]
    assert api.sql("SELECT count(*) FROM api_tokens WHERE name = 'pool-gpu-2'") == [(0,)]


def _status(api: ApiWorld, token: str) -> int:
    """The status a worker token gets on a viewer route: 403 while it authenticates (valid,
    wrong scope), 401 once it does not."""
    return api.client.get("/v1/tasks", headers={"Authorization": f"Bearer {token}"}).status_code


def test_import_ensure_with_an_overlap_keeps_the_rotated_token_valid_until_it_ends(
        api: ApiWorld, tmp_path: Path) -> None:
    """A rotated pool Secret with ``--overlap 600``: outcome replaced, the old token's
    revocation is scheduled 600 s ahead by the database clock, both tokens authenticate
    meanwhile (and ``token list`` shows the pending revocation's time), and once the overlap
    ends the old one is refused (401) while the new one goes on; the name stays the new
    token's. The window is long and the test ends it on purpose (moving ``revoked_at`` to the
    database's now), so no command racing a short real window can make it fail."""
    url = api.pg_db.url
    old, new = "ql3_" + "o" * 43, "ql3_" + "n" * 43
    path = tmp_path / "token"

    def ensure(*extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return ql3("import", "--database-url", url, "--name", "pool-default", "--scope",
                   "worker", "--pool", "default", "--token-file", str(path), "--ensure",
                   "--json", *extra, check=check)

    path.write_text(old)
    made = json.loads(ensure().stdout)
    path.write_text(new)
    rotated = json.loads(ensure("--overlap", "600").stdout)
    assert rotated["outcome"] == "replaced" and rotated["id"] != made["id"]
    (ahead,) = api.sql("SELECT revoked_at - now() FROM api_tokens WHERE id = %(id)s",
                       {"id": made["id"]})
    assert 590 < ahead[0].total_seconds() <= 600
    assert _status(api, old) == 403 and _status(api, new) == 403  # both authenticate
    listed = ql3("list", "--database-url", url).stdout.splitlines()
    assert listed[0].split() == ["ID", "SCOPE", "POOL", "STATE", "NAME"]
    assert all(len(line) <= 80 for line in listed), listed
    at = listed.index(next(line for line in listed if line.startswith(made["id"])))
    old_line, old_note = listed[at], listed[at + 1]
    (new_line,) = [line for line in listed if line.startswith(rotated["id"])]
    assert " revoking " in old_line, old_line
    assert old_note.startswith("  revokes at 20") and old_note.endswith("Z (pending)"), old_note
    assert "revok" not in new_line and " live " in new_line, new_line
    as_json = {r["id"]: r for r in json.loads(ql3("list", "--database-url", url,
                                                  "--json").stdout)}
    assert as_json[made["id"]]["revocation_pending"] is True
    assert as_json[rotated["id"]]["revocation_pending"] is False
    # the same Secret again while the overlap runs: nothing changes
    assert json.loads(ensure("--overlap", "600").stdout) == {"id": rotated["id"],
                                                             "outcome": "unchanged"}
    api.sql("UPDATE api_tokens SET revoked_at = now() WHERE id = %(id)s", {"id": made["id"]})
    deadline = time.monotonic() + 10
    while _status(api, old) != 401:
        assert time.monotonic() < deadline, "the old token still authenticates"
        time.sleep(0.2)
    assert _status(api, new) == 403
    listed = ql3("list", "--database-url", url).stdout.splitlines()
    at = listed.index(next(line for line in listed if line.startswith(made["id"])))
    assert " revoked " in listed[at] and listed[at + 1].startswith("  revoked 20"), listed
    assert "pending" not in listed[at + 1]
    assert api.sql("SELECT id::text FROM api_tokens WHERE name = 'pool-default'"
                   " AND (revoked_at IS NULL OR revoked_at > now())") == [(rotated["id"],)]


def test_a_pending_revocation_does_not_hold_the_name_and_revoke_stays_immediate(
        api: ApiWorld, tmp_path: Path) -> None:
    """During a long overlap the old token's name is free for its successor only (a third
    live token of the name is refused); an explicit ``token revoke`` of the old token ends
    it at once (401), and again answers exit 2 (already revoked); ``--overlap`` needs
    ``--ensure`` and is ≥ 0 (exit 2)."""
    url = api.pg_db.url
    old, new = "ql3_" + "p" * 43, "ql3_" + "q" * 43
    path = tmp_path / "token"
    path.write_text(old)
    base = ("import", "--database-url", url, "--name", "pool-gpu", "--scope", "worker",
            "--pool", "gpu", "--token-file", str(path), "--json")
    made = json.loads(ql3(*base, "--ensure").stdout)
    path.write_text(new)
    rotated = json.loads(ql3(*base, "--ensure", "--overlap", "3600").stdout)
    assert rotated["outcome"] == "replaced"
    assert _status(api, old) == 403 and _status(api, new) == 403
    third = ql3("create", "--database-url", url, "--name", "pool-gpu", "--scope", "worker",
                "--pool", "gpu", check=False)
    assert third.returncode == 2 and "a live token already has this name" in third.stderr
    ql3("revoke", "--database-url", url, made["id"])
    assert _status(api, old) == 401 and _status(api, new) == 403
    again = ql3("revoke", "--database-url", url, made["id"], check=False)
    assert again.returncode == 2, again.stderr
    for bad in (("--ensure", "--overlap", "-1"), ("--overlap", "5")):
        out = ql3(*base, *bad, check=False)
        assert out.returncode == 2 and "--overlap" in out.stderr, (bad, out.stderr)
