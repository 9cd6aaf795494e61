"""Completion receipt file store (docs/protocols.md §3.3, §3.4; ADR-0069 §2–§3).

Layout: ``<root>/<last two hex chars of the attempt id>/<attempt_id>.receipt``,
``<attempt_id>.lock`` and the wrapper's temporary ``.<attempt_id>.receipt.tmp`` beside it
(left only by a wrapper killed while publishing); root and shards are private (0700). Every
directory is opened with ``O_NOFOLLOW | O_DIRECTORY`` one component at a time, so a
symlinked root or shard is refused. The store never lists a directory.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from qinglong.local.process.paths import (
    UnsafePathError,
    check_absolute,
    open_child_dir,
    open_root,
)
from qinglong.shared.errors import ReceiptCodecError
from qinglong.shared.ids import validate_uuid7
from qinglong.shared.receipts import RECEIPT_MAX_BYTES, CompletionReceipt, decode_receipt

RECEIPT_SUFFIX = ".receipt"
LOCK_SUFFIX = ".lock"
TEMP_SUFFIX = ".receipt.tmp"  # wrapper.pyw writes ".<attempt_id>" + this (issue 10 item 7)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_NOT_A_FILE = (errno.ELOOP, errno.ENXIO, errno.ENODEV)  # symlink, socket, device


class ReceiptNotAFileError(ReceiptCodecError):
    """The receipt is a symlink, directory, FIFO or other non-regular file: it cannot be
    read as a receipt (a ReceiptCodecError, so recovery quarantines it as any invalid one)."""

    code = "receipt_not_a_file"


def temporary_name(attempt_id: str) -> str:
    """``.<attempt_id>.receipt.tmp``: the exact name of the wrapper's private temporary
    receipt (docs/protocols.md §3.3), derived from the attempt id so cleanup never lists a directory
    (ADR-0069 §4). Raises InvalidIdentifierError."""
    return "." + validate_uuid7(attempt_id, "attempt_id") + TEMP_SUFFIX


class ReceiptStore:
    """Receipt and attempt-lock files under one root directory.

    The constructor touches nothing on disk (assembly has no side effects, docs/protocols.md §3.6);
    :meth:`prepare_shard` creates directories. Attempt ids are validated as UUIDv7
    (``InvalidIdentifierError``) on every call.
    """

    def __init__(self, receipt_root: str) -> None:
        self._root = check_absolute(receipt_root, "receipt_root")

    @property
    def root(self) -> str:
        """The absolute receipt root directory."""
        return self._root

    def shard_path(self, attempt_id: str) -> str:
        """``<root>/<xx>`` where ``xx`` are the attempt id's last two hex characters."""
        return os.path.join(self._root, validate_uuid7(attempt_id, "attempt_id")[-2:])

    def receipt_path(self, attempt_id: str) -> str:
        """Absolute path of the attempt's receipt (it may not exist)."""
        return os.path.join(self.shard_path(attempt_id), attempt_id + RECEIPT_SUFFIX)

    def lock_path(self, attempt_id: str) -> str:
        """Absolute path of the attempt's lock file (created by the wrapper)."""
        return os.path.join(self.shard_path(attempt_id), attempt_id + LOCK_SUFFIX)

    def prepare_shard(self, attempt_id: str) -> str:
        """Create (0700) or verify the root and the attempt's shard; return the shard path.

        ADR-0069 §2 step 3. Raises UnsafePathError (symlink, not a directory, not private
        to this user) or OSError.
        """
        shard = self.shard_path(attempt_id)
        root_fd = open_root(self._root, create=True, private=True)
        try:
            os.close(open_child_dir(root_fd, shard[-2:], create=True, private=True))
        finally:
            os.close(root_fd)
        return shard

    def _open_shard(self, attempt_id: str) -> int | None:
        """The shard's fd, or None when the root or the shard does not exist."""
        name = validate_uuid7(attempt_id, "attempt_id")[-2:]
        try:
            root_fd = open_root(self._root, create=False)
        except FileNotFoundError:
            return None
        try:
            return open_child_dir(root_fd, name, create=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(root_fd)

    def read(self, attempt_id: str) -> CompletionReceipt | None:
        """Read and decode the attempt's receipt; ``None`` when it does not exist.

        The file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and must be a regular file of at
        most 4096 bytes whose content is the canonical encoding of a receipt for this
        attempt (docs/protocols.md §3.4 step 2).

        Raises:
            ReceiptCodecError: a symlink, FIFO, directory or other non-regular file, too
                big, empty, malformed, or a receipt of another attempt.
            UnsafePathError: the root or the shard is a symlink. OSError: I/O failures.
        """
        shard_fd = self._open_shard(attempt_id)
        if shard_fd is None:
            return None
        try:
            fd = os.open(attempt_id + RECEIPT_SUFFIX, _READ_FLAGS, dir_fd=shard_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in _NOT_A_FILE:
                raise ReceiptNotAFileError("receipt is a symlink or not a file") from None
            raise
        finally:
            os.close(shard_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ReceiptNotAFileError("receipt is not a regular file")
            if st.st_size > RECEIPT_MAX_BYTES:
                raise ReceiptCodecError("receipt exceeds 4096 bytes")
            data = os.read(fd, RECEIPT_MAX_BYTES + 1)
        finally:
            os.close(fd)
        try:
            receipt = decode_receipt(data)
        except RecursionError:  # deeply nested JSON: json.loads does not map it
            raise ReceiptCodecError("receipt is not ASCII JSON") from None
        if receipt.attempt_id != attempt_id:
            raise ReceiptCodecError("receipt belongs to another attempt")
        return receipt

    def delete(self, attempt_id: str) -> bool:
        """Unlink the attempt's receipt (a symlink is removed, never followed), then its
        leftover temporary file (:meth:`discard_temporary`), both by exact name.

        Call only once the attempt is terminal. Returns False when there was no receipt to
        delete. The shard is fsynced after the unlink. Raises UnsafePathError or OSError.
        """
        shard_fd = self._open_shard(attempt_id)
        if shard_fd is None:
            return False
        try:
            try:
                os.unlink(attempt_id + RECEIPT_SUFFIX, dir_fd=shard_fd)
            except FileNotFoundError:
                return False
            os.fsync(shard_fd)
        finally:
            os.close(shard_fd)
        self.discard_temporary(attempt_id)
        return True

    def discard_temporary(self, attempt_id: str) -> bool:
        """Unlink ``.<attempt_id>.receipt.tmp`` (a wrapper killed between creating it and
        unlinking it leaves it; docs/protocols.md §3.3) by its exact name, never listing the shard
        and never following a symlink; True if a file was removed.

        Issue 10 item 7: called when the attempt is terminal (the cleanup journal's item
        handling, and :meth:`delete`). Raises UnsafePathError (a symlinked shard) or OSError.
        """
        name = temporary_name(attempt_id)
        shard_fd = self._open_shard(attempt_id)
        if shard_fd is None:
            return False
        try:
            try:
                os.unlink(name, dir_fd=shard_fd)
            except FileNotFoundError:
                return False
            os.fsync(shard_fd)
            return True
        finally:
            os.close(shard_fd)

    def lock_held(self, attempt_id: str) -> bool:
        """Non-blocking probe of the attempt lock: True while any process of it lives.

        A missing lock file (or shard) means not held; the probe never creates the file.
        The probe holds the lock for an instant; the wrapper retries briefly for that.

        Raises:
            UnsafePathError: the lock file is a symlink or not a regular file.
            OSError: I/O failures.
        """
        return self._with_free_lock(attempt_id, unlink=False) is False

    def lock_state(self, attempt_id: str) -> str:
        """``"held"``, ``"free"`` or ``"missing"`` (no lock file, or no shard): the
        non-blocking probe of :meth:`lock_held`, telling a missing file apart.

        Raises UnsafePathError (a symlink or non-regular file on the way) or OSError.
        """
        state = self._with_free_lock(attempt_id, unlink=False)
        return "missing" if state is None else "free" if state else "held"

    def discard_lock(self, attempt_id: str) -> bool:
        """Remove the attempt's lock file if no process holds it; True if it was removed.

        For cleanup after the attempt is terminal: the file is unlinked while this call
        holds the lock, so a held lock (an escaped process still lives) is never removed.
        Raises UnsafePathError or OSError.
        """
        return self._with_free_lock(attempt_id, unlink=True) is True

    def _with_free_lock(self, attempt_id: str, *, unlink: bool) -> bool | None:
        """Try the lock without blocking: None if there is no lock file, False if it is
        held, True if it was free (and, with ``unlink``, the file was removed under it)."""
        shard_fd = self._open_shard(attempt_id)
        if shard_fd is None:
            return None
        try:
            try:
                fd = os.open(attempt_id + LOCK_SUFFIX, _READ_FLAGS, dir_fd=shard_fd)
            except FileNotFoundError:
                return None
            except OSError as exc:
                if exc.errno in _NOT_A_FILE:
                    raise UnsafePathError("attempt lock is a symlink or not a file") from None
                raise
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise UnsafePathError("attempt lock is not a regular file")
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return False
                if unlink:
                    os.unlink(attempt_id + LOCK_SUFFIX, dir_fd=shard_fd)
                    os.fsync(shard_fd)
                return True
            finally:
                os.close(fd)  # releases the probe's lock
        finally:
            os.close(shard_fd)
