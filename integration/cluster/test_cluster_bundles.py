"""Script bundles end to end (issue 13 item 1; docs/protocols.md §4.7): real ``ql3 control
serve`` and ``ql3 worker run`` on a fresh PostgreSQL database and moto's S3 over real HTTP.

A bundle is pushed through HTTP, a task names its digest and entry point, a worker fetches it
through a presigned GET, verifies it, extracts it into a fresh private directory and runs it
there; the log shows the script's output. A bundle whose object was replaced in the bucket
fails the attempt with ``bundle_mismatch`` and nothing of it runs (the marker file the
script would create never appears). Two attempts get different directories and the second
does not see what the first wrote.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from cluster_kit import CREDS, Cluster, wait_for

from qinglong.control.retention.objects import make_client
from qinglong.shared.bundles import pack

pytestmark = pytest.mark.integration
FINISHED = ("succeeded", "failed", "timed_out", "cancelled", "lost")


class Scene:
    """One control replica, one worker, an admin API client and the database."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        admin = cluster.token("admin")
        control = cluster.start_control("c1", lease_ms=6000, heartbeat_ms=2000)
        assert control.url is not None
        self.api = cluster.api(control.url, admin)
        self.worker = cluster.start_worker("w1", cluster.token("worker", pool="default"),
                                           control.url, concurrency=1)
        self.db = cluster.db.connect()
        self.s3 = make_client(cluster.s3_endpoint, timeout_s=5, **{
            "aws_access_key_id": CREDS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDS["AWS_SECRET_ACCESS_KEY"]})

    def push(self, root: Path) -> str:
        data = pack(root)
        answer = self.api.post("/v1/scripts", content=data,
                               headers={"Content-Type": "application/gzip"})
        assert answer.status_code == 201, answer.text
        digest: str = answer.json()["digest"]
        assert digest == hashlib.sha256(data).hexdigest()
        return digest

    def run(self, name: str) -> str:
        answer = self.api.post(f"/v1/tasks/{name}/run")
        assert answer.status_code == 201, answer.text
        run_id: str = answer.json()["id"]
        return run_id

    def wait_run(self, run_id: str, timeout_s: float = 60) -> dict[str, Any]:
        def status() -> str:
            row = self.db.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()
            return str(row[0]) if row else ""
        wait_for(lambda: status() in FINISHED, timeout_s)
        assert status() in FINISHED, (status(), self.worker.log()[-3000:])
        answer = self.api.get(f"/v1/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        run: dict[str, Any] = answer.json()
        return run

    def attempts(self, run_id: str) -> list[tuple[Any, ...]]:
        return self.db.execute(
            "SELECT id::text, status, reason, started_at, bundle_digest FROM attempts "
            "WHERE run_id = %s ORDER BY number", (run_id,)).fetchall()

    def log(self, attempt_id: str) -> str:
        answer = self.api.get(f"/v1/attempts/{attempt_id}/log")
        assert answer.status_code == 200, answer.text
        return answer.text

    def close(self) -> None:
        self.api.close()
        self.db.close()


@pytest.fixture
def scene(cluster: Cluster) -> Any:
    s = Scene(cluster)
    try:
        yield s
    finally:
        s.close()


def script_tree(root: Path, body: str) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "greeting.txt").write_text("hello from the bundle\n")
    (root / "job.sh").write_text(body)
    return root


def test_a_pushed_bundle_runs_on_a_worker_in_its_own_directory(
        scene: Scene, tmp_path: Path) -> None:
    # no #! line: the entry point runs through /bin/sh, in the extracted bundle
    digest = scene.push(script_tree(tmp_path / "src", (
        'cat lib/greeting.txt\necho "dir=$(pwd)"\necho "bundle=$QL3_BUNDLE_DIR"\n'
        'ls -ld . | cut -c1-10\n')))
    made = scene.api.post("/v1/tasks", json={"name": "greet", "bundle_digest": digest,
                                             "entry_point": "job.sh"})
    assert made.status_code == 201, made.text
    run = scene.wait_run(scene.run("greet"))
    assert run["status"] == "succeeded", run
    ((attempt_id, _, _, _, recorded),) = scene.attempts(run["id"])
    assert recorded == digest
    log = scene.log(attempt_id)
    assert "hello from the bundle" in log
    workdir = scene.cluster.tmp / "spool-w1" / "work" / attempt_id
    assert f"dir={workdir}" in log and f"bundle={workdir}" in log
    assert "drwx------" in log  # private to the worker's user
    assert wait_for(lambda: not workdir.exists(), 10)  # removed after the attempt
    assert (scene.cluster.tmp / "spool-w1" / "bundles" / f"{digest}.tgz").exists()
    # argv runs in the same directory; the entry point must still be a file of the bundle
    edited = scene.api.patch("/v1/tasks/greet", json={"argv": ["sh", "-c", "cat lib/*.txt"]})
    assert edited.status_code == 200, edited.text
    second = scene.wait_run(scene.run("greet"))
    assert second["status"] == "succeeded", second
    assert "hello from the bundle" in scene.log(scene.attempts(second["id"])[0][0])


def test_a_tampered_object_fails_the_attempt_with_a_mismatch_and_nothing_runs(
        scene: Scene, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    digest = scene.push(script_tree(tmp_path / "src", f"#!/bin/sh\ntouch {marker}\necho ran\n"))
    evil = pack(script_tree(tmp_path / "evil", f"#!/bin/sh\ntouch {marker}\necho evil\n"))
    scene.s3.put_object(Bucket=scene.cluster.bucket, Key=f"bundles/sha256/{digest}", Body=evil)
    made = scene.api.post("/v1/tasks", json={"name": "tampered", "bundle_digest": digest,
                                             "entry_point": "job.sh"})
    assert made.status_code == 201, made.text
    run = scene.wait_run(scene.run("tampered"))
    assert run["status"] == "failed", run
    ((attempt_id, status, reason, started_at, _),) = scene.attempts(run["id"])
    assert (status, reason, started_at) == ("failed", "bundle_mismatch", None)
    assert not marker.exists()
    assert scene.api.get(f"/v1/attempts/{attempt_id}/log").status_code == 404  # no output
    assert list((scene.cluster.tmp / "spool-w1" / "work").iterdir()) == []
    assert not (scene.cluster.tmp / "spool-w1" / "bundles" / f"{digest}.tgz").exists()
    assert "bundle_mismatch" in scene.worker.log()


def test_each_attempt_gets_a_fresh_copy_and_never_sees_the_previous_ones_writes(
        scene: Scene, tmp_path: Path) -> None:
    body = ('echo "dir=$(pwd)"\n'
            'if [ -e left-behind ]; then echo SEEN; else echo CLEAN; fi\n'
            'echo changed > lib/greeting.txt; : > left-behind\n'
            'cat lib/greeting.txt\n')
    digest = scene.push(script_tree(tmp_path / "src", body))
    made = scene.api.post("/v1/tasks", json={
        "name": "twice", "bundle_digest": digest, "entry_point": "job.sh",
        "concurrency_policy": "allow"})
    assert made.status_code == 201, made.text
    logs, dirs = [], []
    for _ in range(2):
        run = scene.wait_run(scene.run("twice"))
        assert run["status"] == "succeeded", run
        log = scene.log(scene.attempts(run["id"])[0][0])
        logs.append(log)
        dirs.append(next(line for line in log.splitlines() if line.startswith("dir=")))
    assert dirs[0] != dirs[1]
    assert all("CLEAN" in log and "SEEN" not in log for log in logs), logs
    shown = scene.api.get(f"/v1/scripts/{digest}").json()
    assert shown["used_by_tasks"] == ["twice"]
    assert scene.api.delete(f"/v1/scripts/{digest}").json()["error"]["code"] == "bundle_in_use"


def test_tasks_cannot_name_an_unknown_digest_or_a_missing_entry_point(
        scene: Scene, tmp_path: Path) -> None:
    digest = scene.push(script_tree(tmp_path / "src", "echo hi\n"))
    for body, code in (({"bundle_digest": "a" * 64, "entry_point": "job.sh"},
                        "bundle_not_found"),
                       ({"bundle_digest": digest, "entry_point": "missing.sh"},
                        "entry_point_not_found"),
                       ({"bundle_digest": digest, "entry_point": "lib"},
                        "entry_point_not_found")):
        answer = scene.api.post("/v1/tasks", json={"name": "nope", **body})
        assert (answer.status_code, answer.json()["error"]["code"]) == (422, code)
    assert scene.api.get("/v1/tasks/nope").status_code == 404


def test_a_recorded_bundle_hiding_a_file_as_a_directory_is_refused_by_the_worker(
        scene: Scene, tmp_path: Path) -> None:
    """A bundle recorded before control refused a type-0 member named "x/" (GNU tar lists
    it as an empty directory): the worker's extractor refuses it too and nothing runs."""
    import gzip
    import json
    import tarfile

    marker = tmp_path / "ran"
    script = f"#!/bin/sh\ntouch {marker}\n".encode()
    info = tarfile.TarInfo("x/")
    info.type, info.size = tarfile.REGTYPE, len(script)
    data = gzip.compress(info.tobuf(tarfile.USTAR_FORMAT) + script
                         + b"\0" * (-len(script) % 512) + b"\0" * 1024)
    refused = scene.api.post("/v1/scripts", content=data,
                             headers={"Content-Type": "application/gzip"})
    assert refused.json()["error"]["reason"] == "corrupt", refused.text
    digest = hashlib.sha256(data).hexdigest()
    scene.s3.put_object(Bucket=scene.cluster.bucket, Key=f"bundles/sha256/{digest}", Body=data)
    member = {"path": "x", "kind": "file", "size_bytes": len(script), "mode": 0o755}
    scene.db.execute(
        "INSERT INTO script_bundles (digest, object_key, size_bytes, member_count, "
        "unpacked_bytes, members, created_by) VALUES (%s, %s, %s, 1, %s, %s, 'old')",
        (digest, f"bundles/sha256/{digest}", len(data), len(script), json.dumps([member])))
    scene.db.commit()
    made = scene.api.post("/v1/tasks", json={"name": "hidden-x", "bundle_digest": digest,
                                             "entry_point": "x"})
    assert made.status_code == 201, made.text
    run = scene.wait_run(scene.run("hidden-x"))
    ((_, status, reason, started_at, _),) = scene.attempts(run["id"])
    assert (status, reason, started_at) == ("failed", "bundle_invalid", None)
    assert not marker.exists()
    assert list((scene.cluster.tmp / "spool-w1" / "work").iterdir()) == []
