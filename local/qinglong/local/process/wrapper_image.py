"""Verified, sealed wrapper image (docs/protocols.md §3.2 step 2, ADR-0069 §2 step 2).

The wrapper is opened once with ``O_NOFOLLOW``, checked on that fd (regular file, size cap),
hashed from the bytes read through that fd, and the verified bytes are copied into a memfd
sealed against writes, growth, shrinking and further seals. The interpreter runs
``/proc/self/fd/N`` of that memfd, so neither replacing nor rewriting the file on disk after
the check changes what runs.
"""

from __future__ import annotations

import fcntl
import os
import stat

from qinglong.shared.digest import digests_equal, sha256_hex
from qinglong.shared.errors import LaunchError

MEMFD_NAME = "ql3-wrapper"
SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def read_verified(path: str, max_bytes: int, expected_sha256: str) -> bytes:
    """Read the wrapper through one ``O_NOFOLLOW`` fd and check it against the pin.

    Raises:
        LaunchError(2): a symlink, not a regular file, over ``max_bytes`` bytes, unreadable,
            or a SHA-256 other than ``expected_sha256`` (lowercase hex).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        raise LaunchError(2, "wrapper cannot be opened (missing or a symlink)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LaunchError(2, "wrapper is not a regular file")
        if st.st_size > max_bytes:
            raise LaunchError(2, "wrapper exceeds its size cap")
        chunks: list[bytes] = []
        size = 0
        while size <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        raise LaunchError(2, "wrapper cannot be read") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise LaunchError(2, "wrapper exceeds its size cap")
    data = b"".join(chunks)
    if not digests_equal(sha256_hex(data), expected_sha256):
        raise LaunchError(2, "wrapper digest does not match the pinned SHA-256")
    return data


def sealed_memfd(data: bytes) -> int:
    """Return a close-on-exec memfd holding ``data``, sealed (write, grow, shrink, seal).

    A later ``write``/``ftruncate`` on it fails with EPERM. Raises LaunchError(2) when a
    memfd cannot be made or sealed.
    """
    try:
        fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except OSError:
        raise LaunchError(2, "memfd for the wrapper unavailable") from None
    try:
        fd = above_stdio(fd)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SEALS != SEALS:
            raise LaunchError(2, "wrapper memfd is not sealed")
    except OSError:
        os.close(fd)
        raise LaunchError(2, "wrapper memfd cannot be written or sealed") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def above_stdio(fd: int) -> int:
    """Return ``fd``, or a close-on-exec duplicate numbered 3 or above (closing ``fd``).

    A passed fd numbered 0–2 (possible when this process runs with its stdio closed) would
    be clobbered by the child's stdio setup. Raises OSError.
    """
    if fd > 2:
        return fd
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return moved


def load_wrapper(path: str, max_bytes: int, expected_sha256: str) -> int:
    """ADR-0069 §2 step 2 in one call: verified bytes in a sealed memfd; returns its fd."""
    return sealed_memfd(read_verified(path, max_bytes, expected_sha256))
