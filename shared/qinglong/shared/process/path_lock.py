"""An attempt lock addressed by its path (docs/protocols.md §3.3, §4.2; case C18).

The lock file is created fresh for one attempt, locked exclusively (``flock``) before any
process of the attempt exists, and that open file description is handed to the attempt's
processes: the kernel then holds the lock exactly as long as any of them lives, even one
that left the process group. :class:`PathLock` is the ``AttemptLockPort`` of
``qinglong.shared.process.leftovers`` for such a file.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat

from qinglong.shared.process.lock_holders import find_lock_holders

_CREATE = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PROBE = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def create_locked(path: str) -> int:
    """Create ``path`` (0600, ``O_EXCL | O_NOFOLLOW``), take an exclusive flock on it and
    return the fd (close-on-exec: pass it explicitly to the one process that should hold it).

    Raises FileExistsError when the path exists (a symlink included), OSError otherwise.
    """
    fd = os.open(path, _CREATE, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.close(fd)
        raise
    return fd


class PathLock:
    """The attempt lock at ``path``: a non-blocking probe and a holder scan."""

    def __init__(self, path: str) -> None:
        self.path = path

    def held(self) -> bool:
        """True while any process holds the lock; False when it is free or the file is
        missing. The probe opens a new open file description, holds the lock for an instant
        and never creates the file.

        Raises OSError: ELOOP for a symlink, EINVAL for a non-regular file, I/O errors.
        """
        try:
            fd = os.open(self.path, _PROBE)  # ELOOP (OSError) for a symlink
        except FileNotFoundError:
            return False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "attempt lock is not a regular file", self.path)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False
        finally:
            os.close(fd)

    def holders(self) -> list[int]:
        """Pids (other than this process) with the lock file open (a bounded /proc scan)."""
        return find_lock_holders(self.path)

    def discard(self) -> bool:
        """Unlink the lock file if no process holds it; True if it was removed. A held lock
        (an escaped process still lives) is kept. Raises OSError (not ENOENT)."""
        if self.held():
            return False
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        return True
