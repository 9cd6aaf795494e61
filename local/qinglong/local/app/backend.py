"""Choose how a command reaches the data directory: through a running ``serve`` (socket)
or by owning the directory itself (docs/protocols.md §3.8: one owner per data directory)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from qinglong.local.app.client import DirectBackend, SocketBackend
from qinglong.local.app.datadir import DataDir
from qinglong.shared.errors import DataDirectoryBusyError

BUSY_WAIT_S = 3.0


@contextlib.contextmanager
def open_backend(datadir: DataDir, role: str) -> Iterator[SocketBackend | DirectBackend]:
    """Yield a backend: the socket when ``serve`` answers, else a direct one that holds the
    owner lock until the block ends. Waits up to 3 s for a short-lived owner, then raises
    DataDirectoryBusyError. Storage is imported on the direct path only
    (docs/architecture.md §1)."""
    datadir.require_initialised()
    deadline = time.monotonic() + BUSY_WAIT_S
    while True:
        if os.path.exists(datadir.socket_path) and SocketBackend.probe(datadir.socket_path):
            yield SocketBackend(datadir.socket_path)
            return
        from qinglong.local.app.store import LocalStore

        try:
            store = LocalStore(datadir, role)
        except DataDirectoryBusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)
            continue
        try:
            from qinglong.local.app.service import LocalService
            from qinglong.local.process.receipt_store import ReceiptStore

            receipts = ReceiptStore(datadir.receipt_root)
            yield DirectBackend(LocalService(store.repo, supervised=False, receipts=receipts))
        finally:
            store.close()
        return
