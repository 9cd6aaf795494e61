"""ReceiptStore: layout, private shards, strict reads, deletes, the attempt lock probe."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

import pytest

from qinglong.local.process.paths import UnsafePathError
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.shared.errors import InvalidIdentifierError, ReceiptCodecError, ValidationError
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.ids import uuid7
from qinglong.shared.receipts import CompletionReceipt, ReceiptOutcome

BOOT_ID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"


def uuid7_ending(suffix: str) -> str:
    return uuid7()[:-2] + suffix


def make_receipt(attempt_id: str) -> CompletionReceipt:
    handle = ProcessHandle(BOOT_ID, 4242, 4242, 99)
    return CompletionReceipt(uuid7(), attempt_id, handle, ReceiptOutcome.EXITED, 0, None, 17)


@pytest.fixture
def store(tmp_path: Path) -> ReceiptStore:
    return ReceiptStore(str(tmp_path / "receipts"))


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_layout_is_root_shard_by_last_two_hex_chars(store: ReceiptStore, tmp_path: Path) -> None:
    attempt = uuid7()
    shard = str(tmp_path / "receipts" / attempt[-2:])
    assert store.shard_path(attempt) == shard
    assert store.receipt_path(attempt) == f"{shard}/{attempt}.receipt"
    assert store.lock_path(attempt) == f"{shard}/{attempt}.lock"
    assert not (tmp_path / "receipts").exists(), "construction and paths touch nothing"


def test_ids_and_root_are_validated(tmp_path: Path, store: ReceiptStore) -> None:
    with pytest.raises(InvalidIdentifierError):
        store.receipt_path("../../etc/passwd")
    with pytest.raises(InvalidIdentifierError):
        store.read("6ba7b810-9dad-41d1-80b4-00c04fd430c8")  # a UUIDv4
    with pytest.raises(ValidationError):
        ReceiptStore("relative/receipts")
    with pytest.raises(ValidationError):
        ReceiptStore(str(tmp_path) + "/a/../b")


def test_prepare_shard_creates_private_directories(store: ReceiptStore, tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        attempt = uuid7()
        shard = store.prepare_shard(attempt)
    finally:
        os.umask(old)
    assert shard == store.shard_path(attempt)
    assert mode(tmp_path / "receipts") == 0o700
    assert mode(shard) == 0o700
    assert store.prepare_shard(attempt) == shard  # idempotent


def test_prepare_shard_refuses_symlinks_and_shared_directories(
    store: ReceiptStore, tmp_path: Path
) -> None:
    attempt, shared = uuid7_ending("aa"), uuid7_ending("bb")
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o700)
    (tmp_path / "receipts").mkdir(mode=0o700)
    (tmp_path / "receipts" / "aa").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        store.prepare_shard(attempt)
    assert list(outside.iterdir()) == []
    (tmp_path / "receipts" / "bb").mkdir()
    os.chmod(tmp_path / "receipts" / "bb", 0o755)
    with pytest.raises(UnsafePathError):
        store.prepare_shard(shared)
    linked_root = ReceiptStore(str(tmp_path / "root-link"))
    (tmp_path / "root-link").symlink_to(outside)
    with pytest.raises(UnsafePathError):
        linked_root.prepare_shard(uuid7())


def test_read_returns_none_when_nothing_exists(store: ReceiptStore) -> None:
    attempt = uuid7()
    assert store.read(attempt) is None  # no root
    store.prepare_shard(attempt)
    assert store.read(attempt) is None  # no file
    assert store.read(uuid7()) is None  # no shard (or an empty one)


def test_read_round_trips_a_valid_receipt(store: ReceiptStore) -> None:
    attempt = uuid7()
    store.prepare_shard(attempt)
    receipt = make_receipt(attempt)
    Path(store.receipt_path(attempt)).write_bytes(receipt.encode())
    assert store.read(attempt) == receipt


def test_read_rejects_a_receipt_of_another_attempt(store: ReceiptStore) -> None:
    attempt = uuid7()
    store.prepare_shard(attempt)
    Path(store.receipt_path(attempt)).write_bytes(make_receipt(uuid7()).encode())
    with pytest.raises(ReceiptCodecError):
        store.read(attempt)


def _write_empty(path: Path, valid: bytes) -> None:
    path.write_bytes(b"")


def _write_truncated(path: Path, valid: bytes) -> None:
    path.write_bytes(valid[:-7])


def _write_too_big(path: Path, valid: bytes) -> None:
    path.write_bytes(valid + b" " * (4097 - len(valid)))


def _write_bad_json(path: Path, valid: bytes) -> None:
    path.write_bytes(b"{not json}")


def _write_deeply_nested(path: Path, valid: bytes) -> None:
    path.write_bytes(b"[" * 4000 + b"]" * 96)


def _write_symlink(path: Path, valid: bytes) -> None:
    target = path.parent.parent.parent / "elsewhere.receipt"
    target.write_bytes(valid)
    path.symlink_to(target)


def _write_fifo(path: Path, valid: bytes) -> None:
    os.mkfifo(path, 0o600)


def _write_directory(path: Path, valid: bytes) -> None:
    path.mkdir()


@pytest.mark.parametrize(
    "make",
    [
        _write_empty,
        _write_truncated,
        _write_too_big,
        _write_bad_json,
        _write_deeply_nested,
        _write_symlink,
        _write_fifo,
        _write_directory,
    ],
)
def test_read_rejects_invalid_files(store: ReceiptStore, make: object) -> None:
    attempt = uuid7()
    store.prepare_shard(attempt)
    assert callable(make)
    make(Path(store.receipt_path(attempt)), make_receipt(attempt).encode())
    with pytest.raises(ReceiptCodecError):
        store.read(attempt)


def test_read_refuses_a_symlinked_shard(store: ReceiptStore, tmp_path: Path) -> None:
    attempt = uuid7()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{attempt}.receipt").write_bytes(make_receipt(attempt).encode())
    (tmp_path / "receipts").mkdir(mode=0o700)
    (tmp_path / "receipts" / attempt[-2:]).symlink_to(elsewhere)
    with pytest.raises(UnsafePathError):
        store.read(attempt)


def test_delete_removes_exactly_the_receipt(store: ReceiptStore, tmp_path: Path) -> None:
    attempt = uuid7()
    assert store.delete(attempt) is False
    store.prepare_shard(attempt)
    Path(store.receipt_path(attempt)).write_bytes(make_receipt(attempt).encode())
    assert store.delete(attempt) is True
    assert store.delete(attempt) is False
    target = tmp_path / "target"
    target.write_bytes(b"keep")
    Path(store.receipt_path(attempt)).symlink_to(target)
    assert store.delete(attempt) is True
    assert target.read_bytes() == b"keep"


def test_lock_probe_never_creates_the_file(store: ReceiptStore) -> None:
    attempt = uuid7()
    assert store.lock_held(attempt) is False
    store.prepare_shard(attempt)
    assert store.lock_held(attempt) is False
    assert not os.path.exists(store.lock_path(attempt))


def test_lock_probe_sees_a_holder_and_its_release(store: ReceiptStore) -> None:
    attempt = uuid7()
    store.prepare_shard(attempt)
    fd = os.open(store.lock_path(attempt), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        assert store.lock_held(attempt) is False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert store.lock_held(attempt) is True
        assert store.discard_lock(attempt) is False
        assert os.path.exists(store.lock_path(attempt))
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert store.lock_held(attempt) is False
        assert store.discard_lock(attempt) is True
        assert not os.path.exists(store.lock_path(attempt))
        assert store.discard_lock(attempt) is False
    finally:
        os.close(fd)


def test_lock_probe_refuses_a_symlink_or_fifo(store: ReceiptStore, tmp_path: Path) -> None:
    attempt, other = uuid7_ending("cc"), uuid7_ending("dd")
    store.prepare_shard(attempt)
    target = tmp_path / "target.lock"
    target.write_bytes(b"")
    Path(store.lock_path(attempt)).symlink_to(target)
    with pytest.raises(UnsafePathError):
        store.lock_held(attempt)
    store.prepare_shard(other)
    os.mkfifo(store.lock_path(other), 0o600)
    with pytest.raises(UnsafePathError):
        store.lock_held(other)
