"""Storage ready (ADR-0069 §5): a direct command's store, without the engine that
``application.py`` assembles on it (docs/architecture.md §1)."""

from __future__ import annotations

from qinglong.local.app.datadir import DataDir, OwnerLock
from qinglong.local.app.profiles import Profile, get_profile
from qinglong.local.storage.database import Database
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository

PROFILE_KEY = "profile"


class LocalStore:
    """Storage ready: the owner lock, the database and its repository. Read-only commands
    stop here (no admission, no lifecycle)."""

    def __init__(self, datadir: DataDir, role: str) -> None:
        datadir.require_initialised()
        self.datadir = datadir
        self.lock = OwnerLock(datadir)
        self.lock.acquire_or_raise(role)
        try:
            self.db: Database = open_database(datadir.db_path)
        except BaseException:
            self.lock.release()
            raise
        self.repo = LocalRunRepository(self.db)
        self.profile: Profile = get_profile(self.repo.get_setting(PROFILE_KEY) or "standalone")

    def close(self) -> None:
        """Close the database, then release the owner lock (idempotent)."""
        self.db.close()
        self.lock.release()

