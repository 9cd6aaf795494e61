"""``/v1/scripts`` and bundle tasks over real PostgreSQL (runtime role) and moto over HTTP
(docs/protocols.md §4.7): push (idempotent by digest), list, show, remove (refused while in
use), the checker's refusals as 422/413, task create/edit naming a digest and an entry
point, and the worker's presigned GET for a claimed attempt."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_world import ApiWorld, close_world, open_world
from pg_control_db import PgDb

from qinglong.control.dispatch.claims import claim_attempts
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.workers import register_incarnation
from qinglong.shared import wire
from qinglong.shared.bundles import pack

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
GZIP = {"Content-Type": "application/gzip"}


@pytest.fixture
def world(pg_db: PgDb, s3: Any, make_bucket: Callable[[bool], str]) -> Iterator[ApiWorld]:
    api = open_world(pg_db, s3=s3, bucket=make_bucket(False))
    try:
        yield api
    finally:
        close_world(api)


def bundle(tmp_path: Path, files: dict[str, str]) -> bytes:
    root = tmp_path / hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:8]
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return pack(root)


def push(api: ApiWorld, data: bytes, scope: str = "operator") -> httpx.Response:
    return api.client.post("/v1/scripts", content=data, headers={**GZIP, **api.as_(scope)})


def test_push_is_idempotent_by_digest_and_stores_the_object_under_it(
        world: ApiWorld, tmp_path: Path, direct_s3: Any) -> None:
    data = bundle(tmp_path, {"run.sh": "#!/bin/sh\necho hi\n", "lib/util.sh": "true\n"})
    digest = hashlib.sha256(data).hexdigest()
    first = push(world, data)
    assert first.status_code == 201, first.text
    assert first.json() == {"digest": digest, "size_bytes": len(data), "member_count": 3,
                            "unpacked_bytes": len("#!/bin/sh\necho hi\n") + 5,
                            "created_at": first.json()["created_at"]}
    again = push(world, data, "admin")
    assert (again.status_code, again.json()) == (200, first.json())
    stored = direct_s3.get_object(Bucket=world.ctx.bucket, Key=f"bundles/sha256/{digest}")
    assert stored["Body"].read() == data
    viewer = world.as_("viewer")
    listed = world.client.get("/v1/scripts", headers=viewer).json()
    assert [(i["digest"], i["used_by"]) for i in listed["items"]] == [(digest, 0)]
    assert listed["next_cursor"] is None
    shown = world.client.get(f"/v1/scripts/{digest}", headers=viewer).json()
    assert shown["members"] == [
        {"path": "lib", "kind": "dir", "size_bytes": 0, "mode": 0o755},
        {"path": "lib/util.sh", "kind": "file", "size_bytes": 5, "mode": 0o644},
        {"path": "run.sh", "kind": "file", "size_bytes": 18, "mode": 0o644}]
    assert shown["used_by_tasks"] == []
    assert push(world, data, "viewer").status_code == 403


def test_a_bucket_that_lost_the_object_gets_it_back_on_the_next_push(
        world: ApiWorld, tmp_path: Path, direct_s3: Any) -> None:
    data = bundle(tmp_path, {"run.sh": "echo hi\n"})
    digest = hashlib.sha256(data).hexdigest()
    assert push(world, data).status_code == 201
    direct_s3.delete_object(Bucket=world.ctx.bucket, Key=f"bundles/sha256/{digest}")
    assert push(world, data).status_code == 200
    assert direct_s3.head_object(Bucket=world.ctx.bucket,
                                 Key=f"bundles/sha256/{digest}")["ContentLength"] == len(data)


def hostile_archive(name: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        ok = tarfile.TarInfo("run.sh")
        ok.size = 5
        tar.addfile(ok, io.BytesIO(b"true\n"))
        link = tarfile.TarInfo(name)
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/shadow"
        tar.addfile(link)
    return buffer.getvalue()


def test_a_refused_archive_is_422_with_its_reason_and_nothing_is_stored(
        world: ApiWorld, direct_s3: Any) -> None:
    answer = push(world, hostile_archive("SECRET-NAME"))
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert (error["code"], error["reason"]) == ("bundle_invalid", "link")
    assert "SECRET-NAME" not in answer.text and "shadow" not in answer.text
    assert push(world, gzip.compress(b"not a tar" * 100)).json()["error"]["reason"] == "corrupt"
    assert push(world, b"plain bytes").json()["error"]["reason"] == "not_gzip"
    assert direct_s3.list_objects_v2(Bucket=world.ctx.bucket).get("KeyCount", 0) == 0
    assert world.client.get("/v1/scripts", headers=world.as_("viewer")).json()["items"] == []


def test_a_wrong_media_type_is_415_and_an_oversized_body_is_413(
        world: ApiWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = bundle(tmp_path, {"run.sh": "echo hi\n"})
    wrong = world.client.post("/v1/scripts", content=data,
                              headers={"Content-Type": "application/json",
                                       **world.as_("operator")})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (415, "unsupported_media_type")
    monkeypatch.setattr("qinglong.control.api.scripts.MAX_COMPRESSED_BYTES", len(data) - 1)
    big = push(world, data)
    assert (big.status_code, big.json()["error"]["code"]) == (413, "bundle_too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streamed
        yield data[:10]
        yield data[10:]

    streamed = world.client.post("/v1/scripts", content=chunks(),
                                 headers={**GZIP, **world.as_("operator")})
    assert streamed.status_code == 413


def task_body(name: str, digest: str, entry_point: str = "run.sh", **extra: Any
              ) -> dict[str, Any]:
    return {"name": name, "bundle_digest": digest, "entry_point": entry_point, **extra}


def test_tasks_name_a_recorded_bundle_and_a_file_of_it(world: ApiWorld, tmp_path: Path) -> None:
    data = bundle(tmp_path, {"run.sh": "echo hi\n", "lib/util.sh": "true\n"})
    digest = push(world, data).json()["digest"]
    admin = world.as_("admin")

    def create(body: dict[str, Any]) -> httpx.Response:
        return world.client.post("/v1/tasks", json=body, headers=admin)

    unknown = create(task_body("t1", "0" * 64))
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (422, "bundle_not_found")
    for missing in ("nope.sh", "lib", "lib/"):
        answer = create(task_body("t1", digest, missing))
        assert (answer.status_code, answer.json()["error"]["code"]) == (
            422, "entry_point_not_found"), missing
    for outside in ("../run.sh", "/run.sh"):
        assert create(task_body("t1", digest, outside)).status_code == 422
    assert create({"name": "t1", "bundle_digest": digest}).status_code == 422  # no entry point
    assert create(task_body("t1", digest, cwd="/tmp")).status_code == 422
    assert create(task_body("t1", digest, argv=["a"], shell="b")).status_code == 422
    made = create(task_body("t1", digest, "./lib/util.sh"))
    assert made.status_code == 201, made.text
    assert (made.json()["bundle_digest"], made.json()["entry_point"]) == (digest, "lib/util.sh")
    assert create(task_body("t2", digest, argv=["sh", "run.sh"])).status_code == 201
    shown = world.client.get(f"/v1/scripts/{digest}", headers=admin).json()
    assert (shown["used_by"], shown["used_by_tasks"]) == (2, ["t1", "t2"])


def test_edits_move_a_task_onto_and_off_a_bundle(world: ApiWorld, tmp_path: Path) -> None:
    digest = push(world, bundle(tmp_path, {"run.sh": "echo hi\n"})).json()["digest"]
    admin = world.as_("admin")
    assert world.client.post("/v1/tasks", json={"name": "e", "shell": "true", "cwd": "/tmp"},
                             headers=admin).status_code == 201
    bad = world.client.patch("/v1/tasks/e", json={"bundle_digest": digest,
                                                  "entry_point": "x.sh"}, headers=admin)
    assert bad.json()["error"]["code"] == "entry_point_not_found"
    onto = world.client.patch("/v1/tasks/e", json={"bundle_digest": digest,
                                                   "entry_point": "run.sh", "shell": None},
                              headers=admin)
    assert onto.status_code == 200, onto.text
    assert (onto.json()["cwd"], onto.json()["shell"], onto.json()["entry_point"]) == (
        None, None, "run.sh")
    off = world.client.patch("/v1/tasks/e", json={"bundle_digest": None}, headers=admin)
    assert off.status_code == 422  # no command left
    off = world.client.patch("/v1/tasks/e", json={"bundle_digest": None, "argv": ["true"]},
                             headers=admin)
    assert off.status_code == 200, off.text
    assert (off.json()["bundle_digest"], off.json()["entry_point"]) == (None, None)


def test_a_bundle_in_use_cannot_be_removed_and_a_removed_one_is_gone(
        world: ApiWorld, tmp_path: Path, direct_s3: Any) -> None:
    data = bundle(tmp_path, {"run.sh": "echo hi\n"})
    digest = push(world, data).json()["digest"]
    admin, operator = world.as_("admin"), world.as_("operator")
    assert world.client.post("/v1/tasks", json=task_body("user", digest),
                             headers=admin).status_code == 201
    refused = world.client.delete(f"/v1/scripts/{digest}", headers=operator)
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "bundle_in_use")
    assert world.client.delete(f"/v1/scripts/{digest}",
                               headers=world.as_("viewer")).status_code == 403
    assert world.client.delete("/v1/tasks/user", headers=admin).status_code == 204
    assert world.client.delete(f"/v1/scripts/{digest}", headers=operator).status_code == 204
    assert world.client.get(f"/v1/scripts/{digest}",
                            headers=operator).json()["error"]["code"] == "not_found"
    assert world.client.delete(f"/v1/scripts/{digest}", headers=operator).status_code == 404
    with pytest.raises(direct_s3.exceptions.ClientError):
        direct_s3.head_object(Bucket=world.ctx.bucket, Key=f"bundles/sha256/{digest}")
    # the removed task's definition no longer names it; a new task cannot
    assert world.sql("SELECT bundle_digest FROM tasks WHERE name = 'user'") == [(None,)]
    again = world.client.post("/v1/tasks", json=task_body("user", digest), headers=admin)
    assert again.json()["error"]["code"] == "bundle_not_found"


def test_pages_follow_the_digest_order(world: ApiWorld, tmp_path: Path) -> None:
    digests = sorted(push(world, bundle(tmp_path, {"run.sh": f"echo {i}\n"})).json()["digest"]
                     for i in range(3))
    viewer = world.as_("viewer")
    first = world.client.get("/v1/scripts", params={"limit": 2}, headers=viewer).json()
    assert [i["digest"] for i in first["items"]] == digests[:2]
    rest = world.client.get("/v1/scripts", params={"limit": 2, "cursor": first["next_cursor"]},
                            headers=viewer).json()
    assert ([i["digest"] for i in rest["items"]], rest["next_cursor"]) == (digests[2:], None)


def test_a_worker_gets_a_presigned_get_only_for_its_attempts_bundle(
        world: ApiWorld, tmp_path: Path) -> None:
    data = bundle(tmp_path, {"run.sh": "echo hi\n"})
    other = bundle(tmp_path, {"other.sh": "echo other\n"})
    digest = push(world, data).json()["digest"]
    other_digest = push(world, other).json()["digest"]
    admin = world.as_("admin")
    assert world.client.post("/v1/tasks", json=task_body("w", digest, labels={"zone": "a"}),
                             headers=admin).status_code == 201
    assert world.client.post("/v1/tasks/w/run", headers=admin).status_code == 201
    world.issue("worker")  # creates pool-a (labels zone=a)
    pool_id = world.sql("SELECT id::text FROM worker_pools WHERE name = 'pool-a'")[0][0]
    config = DispatchConfig()
    inc = register_incarnation(world.engine, config, pool_id=pool_id,
                               pool_labels={"zone": "a"},
                               registration=wire.WorkerRegistration("w1", {"zone": "a"}, 1))
    (attempt,) = claim_attempts(world.engine, config, pool_id=pool_id, request=wire.ClaimRequest(
        inc.incarnation_id, 1)).attempts
    assert (attempt.bundle_digest, attempt.entry_point, attempt.argv, attempt.shell) == (
        digest, "run.sh", None, None)
    assert world.sql("SELECT bundle_digest FROM attempts WHERE id = %(a)s",
                     {"a": attempt.lease.attempt_id}) == [(digest,)]
    worker = world.as_("worker")
    lease = attempt.lease.to_json()
    granted = world.client.post("/v1/worker/bundle", json={"lease": lease, "digest": digest},
                                headers=worker)
    assert granted.status_code == 200, granted.text
    grant = wire.BundleGrant.from_json(granted.json())
    assert (grant.digest, grant.size_bytes) == (digest, len(data))
    assert httpx.get(grant.url).content == data  # no credentials: the signature is all
    for asked in (other_digest, "f" * 64):
        refused = world.client.post("/v1/worker/bundle", json={"lease": lease, "digest": asked},
                                    headers=worker)
        assert (refused.status_code, refused.json()["error"]["code"]) == (404, "bundle_not_found")
    # removal waits for the live attempt too (the task itself was removed first)
    assert world.client.delete("/v1/tasks/w", headers=admin).status_code == 204
    assert world.client.delete(f"/v1/scripts/{digest}",
                               headers=world.as_("operator")).status_code == 409


def test_a_file_named_as_a_directory_or_an_archive_without_its_end_is_refused_as_corrupt(
        world: ApiWorld, direct_s3: Any) -> None:
    """GNU tar lists a type-0 member named "x/" as an empty directory (its script hidden
    from a reviewer); a garbage header used to end the archive silently."""
    script = b"#!/bin/sh\necho hidden\n"
    info = tarfile.TarInfo("x/")
    info.type, info.size = tarfile.REGTYPE, len(script)
    hidden = info.tobuf(tarfile.USTAR_FORMAT) + script + b"\0" * (-len(script) % 512)
    ok = tarfile.TarInfo("run.sh")
    ok.size = 5
    good = ok.tobuf(tarfile.USTAR_FORMAT) + b"true\n" + b"\0" * 507
    garbage = b"garbage".ljust(512, b"!")
    for raw in (good + hidden + b"\0" * 1024, good + garbage + hidden + b"\0" * 1024):
        answer = push(world, gzip.compress(raw))
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["reason"]) == ("bundle_invalid", "corrupt")
        assert "hidden" not in answer.text
    assert direct_s3.list_objects_v2(Bucket=world.ctx.bucket).get("KeyCount", 0) == 0
