"""A worker's bundle store (docs/protocols.md §4.7): verified fetch, cache re-verified before
use, fresh private directory per attempt, failure classes; the GET goes through an httpx
MockTransport standing in for the presigned URL."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from qinglong.shared import wire
from qinglong.shared.bundles import pack
from qinglong.shared.ids import uuid7
from qinglong.worker import clock
from qinglong.worker.bundles import BundleFailure, BundleStore
from qinglong.worker.errors import ControlRejectedError, LeaseLostError
from qinglong.worker.spool_dir import remove_stale_checkouts

URL = "http://bucket.invalid/bundles/sha256/x?X-Amz-Signature=s"


def bundle_bytes(tmp_path: Path, files: dict[str, str]) -> bytes:
    root = tmp_path / f"src-{uuid.uuid4().hex[:6]}"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return pack(root)


def claimed(digest: str, entry_point: str = "run.sh", **command: object
            ) -> wire.ClaimedAttempt:
    lease = wire.LeaseRef(attempt_id=uuid7(), lease_token=str(uuid.uuid4()), lease_version=1)
    return wire.ClaimedAttempt(
        lease=lease, run_id=uuid7(), task_id=uuid7(), task_name="t", run_number=1,
        attempt_number=1, argv=command.get("argv"), shell=command.get("shell"),  # type: ignore[arg-type]
        env={}, cwd=None, timeout_ms=None, log_limit_bytes=1024, lease_ms=30000,
        heartbeat_ms=10000, bundle_digest=digest, entry_point=entry_point)


class Bucket:
    """Serves ``body`` at URL and counts grants and GETs."""

    def __init__(self, body: bytes, status: int = 200) -> None:
        self.body, self.status, self.grants, self.gets = body, status, 0, 0
        self.headers: list[httpx.Headers] = []

    def transport(self) -> httpx.MockTransport:
        def handle(request: httpx.Request) -> httpx.Response:
            self.gets += 1
            self.headers.append(request.headers)
            return httpx.Response(self.status, content=self.body)
        return httpx.MockTransport(handle)

    def grant(self, digest: str, size: int | None = None) -> Callable[[], wire.BundleGrant]:
        def give() -> wire.BundleGrant:
            self.grants += 1
            return wire.BundleGrant(digest=digest, url=URL, expires_in_s=60,
                                    size_bytes=size if size is not None else len(self.body))
        return give


def store_for(tmp_path: Path, bucket: Bucket) -> BundleStore:
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700, exist_ok=True)
    return BundleStore(spool, transport=bucket.transport())


def deadline() -> float:
    return clock.now() + 10


def test_a_verified_bundle_is_extracted_into_a_fresh_private_directory(tmp_path: Path) -> None:
    data = bundle_bytes(tmp_path, {"run.sh": "#!/bin/sh\necho hi\n", "lib/x.txt": "x"})
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data)
    store = store_for(tmp_path, bucket)
    attempt = claimed(digest)
    checkout = store.checkout(attempt, bucket.grant(digest), deadline())
    assert checkout.directory == store.work_dir / attempt.lease.attempt_id
    assert stat.S_IMODE(os.stat(checkout.directory).st_mode) == 0o700
    assert (checkout.directory / "lib" / "x.txt").read_text() == "x"
    entry = checkout.directory / "run.sh"
    assert checkout.command == [str(entry)]  # a #! line: run directly, made executable
    assert os.stat(entry).st_mode & stat.S_IXUSR
    # the presigned GET carries nothing of ours: no token, no default client headers
    assert "authorization" not in bucket.headers[0]
    assert "user-agent" not in bucket.headers[0]
    store.release(checkout)
    assert not checkout.directory.exists()


def test_an_entry_point_without_a_shebang_runs_through_sh_and_argv_runs_as_given(
        tmp_path: Path) -> None:
    data = bundle_bytes(tmp_path, {"run.sh": "echo plain\n"})
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data)
    store = store_for(tmp_path, bucket)
    plain = store.checkout(claimed(digest), bucket.grant(digest), deadline())
    assert plain.command == ["/bin/sh", str(plain.directory / "run.sh")]
    given = store.checkout(claimed(digest, argv=["python3", "run.sh"]),
                           bucket.grant(digest), deadline())
    assert given.command == ["python3", "run.sh"]
    shell = store.checkout(claimed(digest, shell="sh run.sh | tr a-z A-Z"),
                           bucket.grant(digest), deadline())
    assert shell.command == ["/bin/sh", "-c", "sh run.sh | tr a-z A-Z"]


def test_bytes_that_do_not_hash_to_the_digest_are_a_mismatch_and_nothing_is_left(
        tmp_path: Path) -> None:
    good = bundle_bytes(tmp_path, {"run.sh": "echo good\n"})
    evil = bundle_bytes(tmp_path, {"run.sh": "echo evil\n"})
    digest = hashlib.sha256(good).hexdigest()
    bucket = Bucket(evil)
    store = store_for(tmp_path, bucket)
    attempt = claimed(digest)
    with pytest.raises(BundleFailure) as caught:
        store.checkout(attempt, bucket.grant(digest, size=len(good)), deadline())
    assert caught.value.reason == "bundle_mismatch"
    assert os.listdir(store.work_dir) == []
    assert os.listdir(store.cache_dir) == []  # never cached


def test_more_bytes_than_granted_are_a_mismatch(tmp_path: Path) -> None:
    data = bundle_bytes(tmp_path, {"run.sh": "echo hi\n"})
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data + b"tail")
    with pytest.raises(BundleFailure) as caught:
        store_for(tmp_path, bucket).checkout(claimed(digest), bucket.grant(digest, len(data)),
                                             deadline())
    assert caught.value.reason == "bundle_mismatch"


def test_the_cache_serves_a_second_attempt_and_a_tampered_copy_is_dropped(
        tmp_path: Path) -> None:
    data = bundle_bytes(tmp_path, {"run.sh": "echo hi\n"})
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data)
    store = store_for(tmp_path, bucket)
    store.checkout(claimed(digest), bucket.grant(digest), deadline())
    store.checkout(claimed(digest), bucket.grant(digest), deadline())
    assert (bucket.grants, bucket.gets) == (1, 1)
    cached = store.cache_dir / f"{digest}.tgz"
    assert stat.S_IMODE(os.stat(cached).st_mode) == 0o600
    cached.write_bytes(bundle_bytes(tmp_path, {"run.sh": "echo tampered\n"}))
    again = store.checkout(claimed(digest), bucket.grant(digest), deadline())
    assert (bucket.grants, bucket.gets) == (2, 2)  # re-verified, dropped, fetched again
    assert (again.directory / "run.sh").read_text() == "echo hi\n"
    assert cached.read_bytes() == data


def test_a_bundle_with_a_link_is_invalid_even_when_its_digest_matches(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("run.sh")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data)
    store = store_for(tmp_path, bucket)
    with pytest.raises(BundleFailure) as caught:
        store.checkout(claimed(digest), bucket.grant(digest), deadline())
    assert caught.value.reason == "bundle_invalid"
    assert os.listdir(store.work_dir) == []


def test_an_entry_point_that_is_not_a_file_of_the_bundle_is_invalid(tmp_path: Path) -> None:
    data = bundle_bytes(tmp_path, {"lib/run.sh": "echo hi\n"})
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data)
    store = store_for(tmp_path, bucket)
    with pytest.raises(BundleFailure) as caught:
        store.checkout(claimed(digest, entry_point="lib"), bucket.grant(digest), deadline())
    assert caught.value.reason == "bundle_invalid"
    assert os.listdir(store.work_dir) == []


def test_a_refused_get_or_grant_is_unavailable_and_a_lost_lease_propagates(
        tmp_path: Path) -> None:
    data = bundle_bytes(tmp_path, {"run.sh": "echo hi\n"})
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(b"<Error>AccessDenied</Error>", status=403)
    store = store_for(tmp_path, bucket)
    with pytest.raises(BundleFailure) as caught:
        store.checkout(claimed(digest), bucket.grant(digest, len(data)), deadline())
    assert caught.value.reason == "bundle_unavailable"

    def not_found() -> wire.BundleGrant:
        raise ControlRejectedError(404, "bundle_not_found")

    with pytest.raises(BundleFailure) as caught:
        store.checkout(claimed(digest), not_found, deadline())
    assert caught.value.reason == "bundle_unavailable"

    def lost() -> wire.BundleGrant:
        raise LeaseLostError("control answered 409: lease lost")

    with pytest.raises(LeaseLostError):
        store.checkout(claimed(digest), lost, deadline())


def test_two_attempts_get_separate_copies_and_release_survives_a_locked_down_tree(
        tmp_path: Path) -> None:
    data = bundle_bytes(tmp_path, {"run.sh": "echo hi\n", "data/keep.txt": "original"})
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data)
    store = store_for(tmp_path, bucket)
    first = store.checkout(claimed(digest), bucket.grant(digest), deadline())
    (first.directory / "data" / "keep.txt").write_text("changed by attempt 1")
    (first.directory / "data" / "new.txt").write_text("left by attempt 1")
    os.chmod(first.directory / "data", 0)  # what a hostile task might do
    second = store.checkout(claimed(digest), bucket.grant(digest), deadline())
    assert second.directory != first.directory
    assert (second.directory / "data" / "keep.txt").read_text() == "original"
    assert not (second.directory / "data" / "new.txt").exists()
    store.release(first)
    store.release(second)
    assert os.listdir(store.work_dir) == []


def test_checkouts_left_by_a_killed_worker_are_removed_unless_their_lock_is_held(
        tmp_path: Path) -> None:
    from qinglong.shared.process.path_lock import create_locked

    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    store = BundleStore(spool)
    for name in ("dead", "alive"):
        (store.work_dir / name / "sub").mkdir(parents=True)
    held = create_locked(str(spool / "alive.lock"))
    try:
        assert remove_stale_checkouts(spool) == 1
        assert sorted(os.listdir(store.work_dir)) == ["alive"]
    finally:
        os.close(held)


def hidden_file_bundle(script: bytes) -> bytes:
    """A gzip tar whose only member is named "x/" with tar type 0 and carries ``script``:
    GNU tar lists it as an empty directory."""
    info = tarfile.TarInfo("x/")
    info.type, info.size = tarfile.REGTYPE, len(script)
    raw = info.tobuf(tarfile.USTAR_FORMAT) + script + b"\0" * (-len(script) % 512)
    return gzip.compress(raw + b"\0" * 1024)


def test_a_file_named_as_a_directory_is_invalid_and_nothing_is_extracted(
        tmp_path: Path) -> None:
    data = hidden_file_bundle(b"#!/bin/sh\necho hidden\n")
    digest = hashlib.sha256(data).hexdigest()
    bucket = Bucket(data)
    store = store_for(tmp_path, bucket)
    with pytest.raises(BundleFailure) as caught:
        store.checkout(claimed(digest, entry_point="x"), bucket.grant(digest), deadline())
    assert caught.value.reason == "bundle_invalid"
    assert os.listdir(store.work_dir) == []
