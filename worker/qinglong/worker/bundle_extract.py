"""Extracting a checked bundle into a fresh private directory (docs/protocols.md §4.7).

Every member passes ``qinglong.shared.bundles.scan`` (our checker) before a byte of it is
written. Writes go through directory file descriptors opened with ``O_NOFOLLOW``: each file
is created ``O_EXCL | O_NOFOLLOW`` below the fresh 0700 root, so nothing outside it can be
reached even if the checker were wrong. A bundle refused half-way leaves nothing behind
(the directory is removed). ``remove_tree`` removes an attempt's directory whatever the
task did to its modes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from qinglong.shared.bundles import (
    DEFAULT_LIMITS,
    BundleError,
    BundleLimits,
    Manifest,
    Member,
    scan,
)
from qinglong.worker import tree_remove

CHUNK = 65536
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Writer:
    """Creates members below the root directory fd ``root``."""

    def __init__(self, root: int) -> None:
        self._root = root

    def _parent(self, parts: list[str]) -> int:
        """An fd of the directory ``parts`` below the root, created 0755 where missing."""
        fd = os.dup(self._root)
        try:
            for part in parts:
                try:
                    os.mkdir(part, 0o700, dir_fd=fd)
                    created = True
                except FileExistsError:
                    created = False
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if created:
                    os.fchmod(nxt, 0o755)
                os.close(fd)
                fd = nxt
        except BaseException:
            os.close(fd)
            raise
        return fd

    def directory(self, member: Member) -> None:
        fd = self._parent(member.path.split("/"))
        try:
            os.fchmod(fd, member.mode)
        finally:
            os.close(fd)

    def file(self, member: Member, stream: IO[bytes]) -> None:
        *parents, name = member.path.split("/")
        parent = self._parent(parents)
        try:
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=parent)
        finally:
            os.close(parent)
        try:
            left = member.size_bytes
            while left > 0:
                data = stream.read(min(CHUNK, left))
                if not data:
                    raise BundleError("corrupt", "a member ends before its size")
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                left -= len(data)
            os.fchmod(fd, member.mode)
        finally:
            os.close(fd)


def extract(source: IO[bytes], target: Path, limits: BundleLimits = DEFAULT_LIMITS
            ) -> Manifest:
    """Create ``target`` (0700; its parent must exist and ``target`` must not) and extract
    the gzip tar ``source`` into it, member by member after each passed the checker.

    Returns the Manifest. Raises BundleError / BundleTooLargeError for a refused bundle and
    OSError when the directory cannot be written; in both cases ``target`` is removed.
    """
    os.mkdir(target, 0o700)
    root = os.open(target, _DIR_FLAGS)
    try:
        os.fchmod(root, 0o700)
        writer = _Writer(root)
        return scan(source, limits, on_file=writer.file, on_dir=writer.directory)
    except BaseException:
        os.close(root)
        root = -1
        remove_tree(target)
        raise
    finally:
        if root >= 0:
            os.close(root)


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything below it through directory fds: symlinks are removed,
    never followed, even ones swapped in while the walk runs; directories a task made
    unreadable or unwritable are opened up through their own fd
    (``qinglong.worker.tree_remove``, docs/protocols.md §4.8). Errors that remain are
    ignored: a leftover is removed at the next worker start."""
    if os.path.lexists(path):
        tree_remove.remove_tree(path)
