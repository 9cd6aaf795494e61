"""The data directory: its layout, initialisation and the one-owner lock.

Layout (all 0700 directories, 0600 files)::

    DIR/ql3.db        the SQLite database (the source of truth)
    DIR/ql3.lock      flock held by the one owner (``serve`` or a direct command)
    DIR/ql3.sock      the Unix socket of a running ``serve``
    DIR/logs/         attempt logs (the launcher's log root)
    DIR/receipts/     private receipt shards (ADR-0069 §2 step 3)
    DIR/scripts/      the scripts folder the panel edits (made on first use)
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from qinglong.shared.errors import DataDirectoryBusyError, QinglongError, ValidationError

ENV_DATA_DIR = "QL3_DATA_DIR"
SOCKET_PATH_MAX = 107  # sun_path is 108 bytes with its terminating NUL


class NotInitialisedError(QinglongError):
    """The data directory has not been initialised with ``ql3 local init``."""

    code = "not_initialised"


def default_data_dir() -> str:
    """``$QL3_DATA_DIR``, else ``$XDG_DATA_HOME/ql3``, else ``~/.local/share/ql3``."""
    if os.environ.get(ENV_DATA_DIR):
        return os.environ[ENV_DATA_DIR]
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(Path.home(), ".local", "share")
    return os.path.join(base, "ql3")


@dataclass(frozen=True, slots=True)
class DataDir:
    """Paths of one data directory (``root`` is made absolute)."""

    root: str

    @classmethod
    def at(cls, path: str) -> DataDir:
        """The data directory at ``path`` (not created)."""
        return cls(os.path.abspath(os.path.expanduser(path)))

    @property
    def db_path(self) -> str:
        """The database file."""
        return os.path.join(self.root, "ql3.db")

    @property
    def lock_path(self) -> str:
        """The owner lock file."""
        return os.path.join(self.root, "ql3.lock")

    @property
    def socket_path(self) -> str:
        """The serve socket."""
        return os.path.join(self.root, "ql3.sock")

    @property
    def log_root(self) -> str:
        """The root of attempt logs."""
        return os.path.join(self.root, "logs")

    @property
    def receipt_root(self) -> str:
        """The root of receipt shards."""
        return os.path.join(self.root, "receipts")

    @property
    def scripts_root(self) -> str:
        """The scripts folder (docs/panel.md "Scripts"; made 0700 when first used)."""
        return os.path.join(self.root, "scripts")

    def initialised(self) -> bool:
        """True when the database file exists."""
        return os.path.isfile(self.db_path)

    def create(self) -> None:
        """Create the directories with mode 0700; an existing root is made 0700 too (it
        holds secrets). Raises ValidationError when the path is too long for the socket."""
        if len(os.fsencode(self.socket_path)) > SOCKET_PATH_MAX:
            raise ValidationError(
                "data_dir", f"path too long: the socket path must fit in {SOCKET_PATH_MAX} bytes"
            )
        old = os.umask(0o077)
        try:
            for path in (self.root, self.log_root, self.receipt_root):
                os.makedirs(path, mode=0o700, exist_ok=True)
            os.chmod(self.root, 0o700)
        finally:
            os.umask(old)

    def require_initialised(self) -> None:
        """Raise NotInitialisedError unless ``ql3 local init`` ran here."""
        if not self.initialised():
            raise NotInitialisedError(  # named: QL3_DATA_DIR or --data-dir may hold a typo
                f"the data directory {self.root} is not initialised; run `ql3 local init` "
                "first"
            )


class OwnerLock:
    """The exclusive flock on ``ql3.lock``: one owner per data directory.

    ``acquire()`` returns False when another process holds it. The lock file records the
    owner's pid and role for messages (advisory only; the flock is the truth).
    """

    def __init__(self, datadir: DataDir) -> None:
        self.datadir = datadir
        self._fd: int | None = None

    def acquire(self, role: str) -> bool:
        """Try to take the lock without blocking. Raises OSError on I/O failure."""
        fd = os.open(
            self.datadir.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {role}\n".encode())
        self._fd = fd
        return True

    def holder(self) -> str:
        """What the lock file says about its holder (``"<pid> <role>"``), or ``""``."""
        try:
            with open(self.datadir.lock_path, encoding="ascii", errors="replace") as fh:
                return fh.read(64).strip()
        except OSError:
            return ""

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def acquire_or_raise(self, role: str) -> None:
        """Take the lock or raise DataDirectoryBusyError naming the holder's role and pid."""
        if not self.acquire(role):
            holder = self.holder().split()
            who = f"{holder[1]} (pid {holder[0]})" if len(holder) == 2 else "another ql3 process"
            raise DataDirectoryBusyError(f"the data directory is in use by {who}")
