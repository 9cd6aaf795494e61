"""Quarantine of an invalid completion receipt (ADR-0069 §3; docs/protocols.md §3.4 step 2).

First the intent is persisted (journal state ``quarantined``, a deterministic path, a purge
time), then the file is moved with ``rename`` between directory fds, which never follows a
symlink (a symlinked "receipt" is moved as the link itself). Repeating it is harmless: a
missing source means the move already happened.
"""

from __future__ import annotations

import os

from qinglong.local.process.paths import open_child_dir, open_root
from qinglong.local.process.receipt_store import RECEIPT_SUFFIX, ReceiptStore
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.ids import validate_uuid7

QUARANTINE_DIR = "quarantine"
PURGE_AFTER_MS = 24 * 3600 * 1000


def quarantine_path(store: ReceiptStore, attempt_id: str) -> str:
    """``<receipt root>/quarantine/<attempt id>.receipt``."""
    return os.path.join(store.root, QUARANTINE_DIR, validate_uuid7(attempt_id) + RECEIPT_SUFFIX)


def quarantine_receipt(
    repo: LocalRunRepository,
    store: ReceiptStore,
    run_id: str,
    attempt_id: str,
    purge_after_ms: int = PURGE_AFTER_MS,
) -> str:
    """Persist the intent, then move the receipt into quarantine; returns the new path.

    Raises StorageError (nothing moved) or OSError/UnsafePathError (intent kept: the cleanup
    scanner finishes the move later).
    """
    target = quarantine_path(store, attempt_id)
    repo.journal_quarantine(run_id, attempt_id, target, repo.clock() + purge_after_ms)
    finish_quarantine_move(store, attempt_id)
    return target


def finish_quarantine_move(store: ReceiptStore, attempt_id: str) -> bool:
    """Move ``<shard>/<attempt>.receipt`` to the quarantine directory if still there.

    Returns True when something was moved. Idempotent.
    """
    name = validate_uuid7(attempt_id) + RECEIPT_SUFFIX
    root_fd = open_root(store.root, create=True, private=True)
    try:
        shard_fd = open_child_dir(root_fd, attempt_id[-2:], create=True, private=True)
        try:
            quarantine_fd = open_child_dir(root_fd, QUARANTINE_DIR, create=True, private=True)
            try:
                try:
                    os.rename(name, name, src_dir_fd=shard_fd, dst_dir_fd=quarantine_fd)
                except FileNotFoundError:
                    return False
                os.fsync(quarantine_fd)
                os.fsync(shard_fd)
                return True
            finally:
                os.close(quarantine_fd)
        finally:
            os.close(shard_fd)
    finally:
        os.close(root_fd)
