"""The wrapper's temporary receipt has a name the store derives from the attempt id (issue 10
item 7; docs/protocols.md §3.3): cleanup unlinks exactly that name, never lists the shard."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

from qinglong.local.process.launch_request import DEFAULT_WRAPPER_PATH
from qinglong.local.process.paths import UnsafePathError
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.shared.ids import uuid7


def load_wrapper() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("ql3_wrapper_temp_test", DEFAULT_WRAPPER_PATH)
    spec = importlib.util.spec_from_file_location("ql3_wrapper_temp_test", DEFAULT_WRAPPER_PATH,
                                                  loader=loader)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wrapper_writes_its_temporary_receipt_under_the_derived_name(tmp_path: Path) -> None:
    """A file already at ``.<attempt>.receipt.tmp`` stops the wrapper's O_EXCL create: so
    that is the name it writes, the one cleanup removes."""
    store = ReceiptStore(str(tmp_path / "receipts"))
    run_id, attempt_id = uuid7(), uuid7()
    shard = store.prepare_shard(attempt_id)
    planted = Path(shard) / f".{attempt_id}.receipt.tmp"
    planted.write_bytes(b"left by a crash")
    fd = os.open(shard, os.O_RDONLY | os.O_DIRECTORY)
    try:
        published = load_wrapper().publish(fd, run_id, attempt_id, "exited", 0, None)
    finally:
        os.close(fd)
    assert published is False
    assert planted.read_bytes() == b"left by a crash"
    assert not os.path.exists(store.receipt_path(attempt_id))


def test_deleting_a_receipt_also_unlinks_the_temporary_left_beside_it(tmp_path: Path) -> None:
    store = ReceiptStore(str(tmp_path / "receipts"))
    attempt_id = uuid7()
    shard = Path(store.prepare_shard(attempt_id))
    (shard / f"{attempt_id}.receipt").write_bytes(b"{}")
    temp = shard / f".{attempt_id}.receipt.tmp"
    temp.write_bytes(b"{")
    assert store.delete(attempt_id) is True
    assert not temp.exists()


def test_a_symlink_at_the_temporary_name_is_removed_never_followed(tmp_path: Path) -> None:
    store = ReceiptStore(str(tmp_path / "receipts"))
    attempt_id = uuid7()
    shard = Path(store.prepare_shard(attempt_id))
    outside = tmp_path / "precious"
    outside.write_bytes(b"keep")
    (shard / f".{attempt_id}.receipt.tmp").symlink_to(outside)
    assert store.discard_temporary(attempt_id) is True
    assert outside.read_bytes() == b"keep"
    assert store.discard_temporary(attempt_id) is False


def test_discarding_a_temporary_refuses_a_symlinked_shard(tmp_path: Path) -> None:
    store = ReceiptStore(str(tmp_path / "receipts"))
    attempt_id = uuid7()
    (tmp_path / "receipts").mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / f".{attempt_id}.receipt.tmp"
    victim.write_bytes(b"keep")
    os.symlink(elsewhere, store.shard_path(attempt_id))
    with pytest.raises(UnsafePathError):
        store.discard_temporary(attempt_id)
    assert victim.read_bytes() == b"keep"
