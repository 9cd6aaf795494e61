"""Secret values sealed at rest (docs/operations.md "Secret values at rest"), through the real
``ql3`` binary, real ``ql3 control serve`` replicas, a real worker, PostgreSQL and moto.

Before ``ql3 control secrets enable`` a ``pg_dump`` of the database holds a task's secret
value (the check can fail); after it, none — also after a task that prints its secret ran
and after a task added later. The worker still receives the value. Rotation: add a key as
primary and roll, ``rotate-key``, remove the old key and roll; the worker still receives it.
A replica without the keyring, or with one lacking the key in use, refuses to start (exit 2,
one clear line). ``status`` fits 80 columns. Push-channel URLs (tokens in their path) are
sealed the same way and still delivered, to a local receiver, after enable and rotation.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from cluster_kit import QL3, Cluster, Proc, wait_for
from test_cluster_push import receiver  # noqa: F401  (the local receiver fixture)

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SECRET = "秘密-cookie-Zq81xv"  # what the worker must receive and the dump must not hold
LATER = "后来的-token-Yw27"


def keyring_file(path: Path, primary: str, keys: dict[str, bytes]) -> str:
    path.write_text(json.dumps({"primary": primary, "keys": {
        k: base64.b64encode(v).decode() for k, v in keys.items()}}))
    path.chmod(0o600)
    return str(path)


def dump(cluster: Cluster) -> str:
    out = subprocess.run(["pg_dump", "--data-only", cluster.db.owner_url],
                         capture_output=True, check=True, timeout=60)
    return out.stdout.decode("utf-8")


def cli(cluster: Cluster, url: str, token: str, *args: str, stdin: str = "",
        code: int | None = 0) -> subprocess.CompletedProcess[str]:
    env = cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=token, COLUMNS="80")
    out = subprocess.run([QL3, "cluster", *args], env=env, input=stdin, capture_output=True,
                         text=True, timeout=90, check=False)
    assert code is None or out.returncode == code, (args, out.returncode, out.stdout,
                                                    out.stderr)
    return out


def secrets_cli(cluster: Cluster, *args: str, code: int = 0) -> str:
    out = cluster.ql3("control", "secrets", *args, "--database-url", cluster.db.runtime_url,
                      check=False)
    assert out.returncode == code, (args, out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    assert all(len(line) <= 80 for line in out.stdout.splitlines()), out.stdout
    return out.stdout


def received(path: Path, timeout: float = 60) -> str:
    assert wait_for(path.exists, timeout), f"{path} never written"
    return path.read_text(encoding="utf-8")


def roll(cluster: Cluster, proc: Proc, name: str, *extra: str) -> Proc:
    """Stop replica ``proc`` and start ``name`` on the same port with ``extra`` options."""
    assert proc.url is not None
    port = int(proc.url.rsplit(":", 1)[1])
    proc.terminate()
    return cluster.start_control(name, *extra, port=port)


def test_sealing_hides_values_from_a_dump_keeps_claims_and_rotates(
        cluster: Cluster, tmp_path: Path) -> None:
    k1, k2 = os.urandom(32), os.urandom(32)
    ring1 = keyring_file(tmp_path / "ring1.json", "k1", {"k1": k1})
    ring12 = keyring_file(tmp_path / "ring12.json", "k2", {"k1": k1, "k2": k2})
    ring2 = keyring_file(tmp_path / "ring2.json", "k2", {"k2": k2})
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    control = cluster.start_control("c1")
    url = control.url or ""
    admin, operator = cluster.token("admin"), cluster.token("operator")
    # the task prints its secret (the stored log is another matter) and hands it to a file
    script = f'printf %s "$API_KEY" > {out_dir}/"$RUN"; echo "key=$API_KEY"'
    cli(cluster, url, admin, "task", "add", "print-secret", "--schedule", "@once",
        "--env", "RUN=r1", "--secret-env", "API_KEY", "--", "sh", "-c", script,
        stdin=SECRET)
    assert SECRET in dump(cluster)  # plain text before sealing: the check below can fail

    # roll the replica with the keyring, then switch sealing on
    control = roll(cluster, control, "c1b", "--secrets-keyring", ring1)
    said = secrets_cli(cluster, "enable", "--keyring", ring1)
    assert "sealed 1 value(s) in 1 task(s)" in said
    assert SECRET not in dump(cluster)
    status = secrets_cli(cluster, "status")
    assert "sealing: on  primary key: k1" in status
    assert "tasks with plaintext secrets: 0" in status
    assert "sealed with k1: 1 value(s)" in status

    # a worker still receives the value; the run leaves no value in the database
    worker = cluster.token("worker", pool="pool-a")
    cluster.start_worker("w1", worker, url, concurrency=1)
    cli(cluster, url, operator, "run", "print-secret", "--wait")
    assert received(out_dir / "r1") == SECRET
    # a task added (and edited) after enable is sealed on write
    cli(cluster, url, admin, "task", "add", "later", "--schedule", "@once",
        "--secret-env", "API_KEY", "--", "sh", "-c", script, stdin=LATER)
    cli(cluster, url, admin, "task", "edit", "print-secret", "--env", "RUN=r2")
    text = dump(cluster)
    assert SECRET not in text and LATER not in text
    assert "sealed with k1: 2 value(s)" in secrets_cli(cluster, "status")
    cli(cluster, url, operator, "run", "print-secret", "--wait")
    assert received(out_dir / "r2") == SECRET  # the edit kept the sealed value

    # a replica without the keyring is refused once sealing is on: exit 2, one clear line
    bare = cluster.start_control("c-bare", wait=False)
    assert bare.popen.wait(timeout=60) == 2
    assert "--secrets-keyring" in bare.log() and "secrets enable" in bare.log()
    assert SECRET not in bare.log()

    # rotation: add k2 as primary and roll, rotate-key, remove k1 and roll
    control = roll(cluster, control, "c1c", "--secrets-keyring", ring12)
    # as if rotate-key had been stopped after recording k2: k1 is still in use, and a
    # replica whose keyring dropped it already is refused
    with cluster.db.connect() as conn:
        conn.execute("UPDATE secret_sealing SET primary_key_id = 'k2'")
    early = cluster.start_control("c-early", "--secrets-keyring", ring2, wait=False)
    assert early.popen.wait(timeout=60) == 2
    assert "lacks key k1, which 2 value(s) are still sealed with" in early.log()
    said = secrets_cli(cluster, "rotate-key", "--keyring", ring12)
    assert "primary key k2; re-sealed 2 value(s) in 2 task(s)" in said
    status = secrets_cli(cluster, "status")
    assert "sealed with k2: 2 value(s)" in status and "k1" not in status
    old_only = cluster.start_control("c-old", "--secrets-keyring", ring1, wait=False)
    assert old_only.popen.wait(timeout=60) == 2
    assert "lacks key k2" in old_only.log()
    control = roll(cluster, control, "c1d", "--secrets-keyring", ring2)
    cli(cluster, url, admin, "task", "edit", "print-secret", "--env", "RUN=r3")
    cli(cluster, url, operator, "run", "print-secret", "--wait")
    assert received(out_dir / "r3") == SECRET
    text = dump(cluster)
    assert SECRET not in text and LATER not in text


def test_enable_refuses_a_malformed_keyring_before_any_change(
        cluster: Cluster, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"primary": "k1", "keys": {"k1": "c2hvcnQ="}}')  # 5 bytes, not 32
    out = cluster.ql3("control", "secrets", "enable", "--database-url",
                      cluster.db.runtime_url, "--keyring", str(bad), check=False)
    assert out.returncode == 2, out.stderr
    assert "--secrets-keyring: key k1 must be 32 bytes" in out.stderr
    assert "c2hvcnQ" not in out.stderr
    assert "sealing: off" in secrets_cli(cluster, "status")


COOKIES = ("pt_key=甲-Vq63rk;", "pt_key=乙-Hn48ws;", "pt_key=丙-Lc95tj;")
OTHER_POOL = "只给-pool-b-Xe71"


def test_sealing_covers_global_variables_claims_and_rotation(
        cluster: Cluster, tmp_path: Path) -> None:
    """Secret global variables (migration 0012): sealed by enable, sealed on write after
    it, opened for a worker of the variable's pool, re-sealed by rotate-key."""
    k1, k2 = os.urandom(32), os.urandom(32)
    ring1 = keyring_file(tmp_path / "ring1.json", "k1", {"k1": k1})
    ring12 = keyring_file(tmp_path / "ring12.json", "k2", {"k1": k1, "k2": k2})
    ring2 = keyring_file(tmp_path / "ring2.json", "k2", {"k2": k2})
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    control = cluster.start_control("c1")
    url = control.url or ""
    admin, operator = cluster.token("admin"), cluster.token("operator")
    cli(cluster, url, operator, "vars", "set", "JD_COOKIE", "--remark", "账号一",
        stdin=COOKIES[0])
    cli(cluster, url, operator, "vars", "set", "JD_COOKIE", "--add", stdin=COOKIES[1])
    cli(cluster, url, operator, "vars", "set", "OTHER", "--pool", "pool-b",
        stdin=OTHER_POOL)
    text = dump(cluster)
    assert COOKIES[0] in text and OTHER_POOL in text  # plain before: the check can fail

    plain = cluster.start_control("c-plain")  # started before enable, without a keyring
    control = roll(cluster, control, "c1b", "--secrets-keyring", ring1)
    said = secrets_cli(cluster, "enable", "--keyring", ring1)
    # a replica without the keyring stores no secret value once sealing is on: 503
    with cluster.api(plain.url or "", operator) as api:
        refused = api.post("/v1/vars/JD_COOKIE", json={"value": "新值-Pz90qa", "add": True})
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "secrets_key_missing" and "Pz90qa" not in refused.text
    plain.terminate()
    text = dump(cluster)
    assert not any(v in text for v in (*COOKIES[:2], OTHER_POOL, "Pz90qa")), "in the dump"
    assert "sealed 3 global variable value(s)" in said
    status = secrets_cli(cluster, "status")
    assert "variable values in plain text: 0" in status
    assert "sealed with k1: 3 value(s)" in status

    # a value added after enable is sealed on write
    cli(cluster, url, operator, "vars", "set", "JD_COOKIE", "--add", stdin=COOKIES[2])
    assert COOKIES[2] not in dump(cluster)
    assert "sealed with k1: 4 value(s)" in secrets_cli(cluster, "status")

    # a worker of pool-a receives JD_COOKIE opened and joined, and not pool-b's variable
    worker = cluster.token("worker", pool="pool-a")
    cluster.start_worker("w1", worker, url, concurrency=1)
    script = (f'printf %s "$JD_COOKIE" > {out_dir}/"$RUN"; '
              f'printf %s "${{OTHER:-none}}" > {out_dir}/"$RUN".other')
    cli(cluster, url, admin, "task", "add", "jd_sign", "--schedule", "@once",
        "--env", "RUN=r1", "--", "sh", "-c", script)
    cli(cluster, url, operator, "run", "jd_sign", "--wait")
    assert received(out_dir / "r1") == "&".join(COOKIES)
    assert received(out_dir / "r1.other") == "none"

    # rotation re-seals the variable values with the new primary
    control = roll(cluster, control, "c1c", "--secrets-keyring", ring12)
    said = secrets_cli(cluster, "rotate-key", "--keyring", ring12)
    assert "re-sealed 4 global variable value(s)" in said
    status = secrets_cli(cluster, "status")
    assert "sealed with k2: 4 value(s)" in status and "k1" not in status
    control = roll(cluster, control, "c1d", "--secrets-keyring", ring2)
    cli(cluster, url, admin, "task", "edit", "jd_sign", "--env", "RUN=r2")
    cli(cluster, url, operator, "run", "jd_sign", "--wait")
    assert received(out_dir / "r2") == "&".join(COOKIES)
    text = dump(cluster)
    assert not any(v in text for v in (*COOKIES, OTHER_POOL)), "a value in the dump"


BOT_TOKEN = "DevKey7sealedBark"  # a Bark device key: in the URL's path, the secret part
HOOK_TOKEN = "钩子-token-Rt62"


def test_sealing_covers_channel_urls_and_delivery_after_enable_and_rotation(
        cluster: Cluster, tmp_path: Path,
        receiver: tuple[int, list[tuple[str, dict[str, Any]]]]) -> None:  # noqa: F811
    """Push-channel URLs (migration 0013): sealed by enable, sealed on write after it,
    opened to deliver (``notify test`` and a failed run's notification, at a local receiver),
    re-sealed by rotate-key; lists show scheme and host only."""
    port, posts = receiver
    k1, k2 = os.urandom(32), os.urandom(32)
    ring1 = keyring_file(tmp_path / "ring1.json", "k1", {"k1": k1})
    ring12 = keyring_file(tmp_path / "ring12.json", "k2", {"k1": k1, "k2": k2})
    ring2 = keyring_file(tmp_path / "ring2.json", "k2", {"k2": k2})

    control = cluster.start_control("c1")
    url = control.url or ""
    admin = cluster.token("admin")
    cli(cluster, url, admin, "notify", "add", stdin=f"bark://127.0.0.1:{port}/{BOT_TOKEN}")
    assert BOT_TOKEN in dump(cluster)  # plain text before sealing: the check can fail

    control = roll(cluster, control, "c1b", "--secrets-keyring", ring1)
    said = secrets_cli(cluster, "enable", "--keyring", ring1)
    assert "sealed 1 push-channel URL(s)" in said
    assert BOT_TOKEN not in dump(cluster)
    status = secrets_cli(cluster, "status")
    assert "channel URLs in plain text: 0" in status and "sealed with k1: 1 value(s)" in status

    # delivery opens the sealed URL: the receiver gets the device key
    tested = cli(cluster, url, admin, "notify", "test")
    assert tested.stdout.count(": ok") == 1, tested.stdout
    assert wait_for(lambda: any(d.get("device_key") == BOT_TOKEN for _, d in posts), 10)
    # a channel added after enable is sealed on write; lists show scheme and host only
    cli(cluster, url, admin, "notify", "add", "--on", "failed",
        stdin=f"json://127.0.0.1:{port}/hook/{HOOK_TOKEN}")
    text = dump(cluster)
    assert BOT_TOKEN not in text and HOOK_TOKEN not in text
    listed = cli(cluster, url, admin, "notify", "list").stdout
    assert f"bark://127.0.0.1:{port}/…" in listed and f"json://127.0.0.1:{port}/…" in listed
    assert BOT_TOKEN not in listed and HOOK_TOKEN not in listed

    # rotation re-seals both URLs; a failed run then reaches both channels
    control = roll(cluster, control, "c1c", "--secrets-keyring", ring12)
    said = secrets_cli(cluster, "rotate-key", "--keyring", ring12)
    assert "re-sealed 2 push-channel URL(s)" in said
    status = secrets_cli(cluster, "status")
    assert "sealed with k2: 2 value(s)" in status and "k1" not in status
    control = roll(cluster, control, "c1d", "--secrets-keyring", ring2)
    posts.clear()
    cluster.start_worker("w1", cluster.token("worker", pool="pool-a"), url, concurrency=1)
    cli(cluster, url, admin, "task", "add", "jd_sign", "--schedule", "@once", "--",
        "sh", "-c", "echo 签到失败; exit 3")
    assert cli(cluster, url, admin, "run", "jd_sign", "--wait", code=None).returncode != 0
    assert wait_for(lambda: len(posts) >= 2, 30), posts
    assert any(p == "/push" and d.get("device_key") == BOT_TOKEN for p, d in posts)
    assert any(unquote(p) == f"/hook/{HOOK_TOKEN}" for p, _ in posts), posts
    text = dump(cluster)
    assert BOT_TOKEN not in text and HOOK_TOKEN not in text
    assert not any(BOT_TOKEN in p.log() or HOOK_TOKEN in p.log() for p in cluster.procs)
