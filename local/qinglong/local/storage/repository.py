"""The local run repository: the one object that reads and writes the local database.

Every status change is a compare-and-set on (id, expected status, version) in one transaction
together with its event (docs/architecture.md §2: run and attempt each get one, "双 Event"). A lost
race raises :class:`ConcurrentUpdateError`; nothing is overwritten silently.

One repository object per database: ``LocalRunRepository`` composes the per-table mixins
(tasks ``task_store``/``task_queries``, runs ``run_store``, attempts ``attempt_store``, events
``event_store``, the receipt journal ``journal``, settings and variables ``settings_store``,
scheduling, dispatch, retention, leftovers, run numbers, slot outcomes
``occurrence_queries``) over its one ``Database``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from qinglong.local.storage.attempt_store import AttemptStore
from qinglong.local.storage.database import Database
from qinglong.local.storage.dispatch_queries import DispatchQueries
from qinglong.local.storage.event_store import EventStore
from qinglong.local.storage.journal import ReceiptJournalQueries
from qinglong.local.storage.leftovers import LeftoverQueries
from qinglong.local.storage.occurrence_queries import OccurrenceQueries
from qinglong.local.storage.retention import RetentionQueries
from qinglong.local.storage.run_numbers import RunNumberQueries
from qinglong.local.storage.run_store import MAX_CANDIDATE_LIMIT, CandidatePage, RecoveryCandidate
from qinglong.local.storage.schedule_queries import ScheduleQueries
from qinglong.local.storage.settings_store import SettingsStore
from qinglong.local.storage.task_queries import TaskQueries
from qinglong.local.storage.task_store import TaskStore

__all__ = [  # the recovery source's types moved to run_store.py; still importable here
    "MAX_CANDIDATE_LIMIT", "CandidatePage", "LocalRunRepository",
    "RecoveryCandidate", "now_ms",
]


def now_ms() -> int:
    """Wall-clock Unix milliseconds."""
    return time.time_ns() // 1_000_000


class LocalRunRepository(
    ReceiptJournalQueries, RetentionQueries, LeftoverQueries, DispatchQueries, ScheduleQueries,
    RunNumberQueries, TaskQueries, TaskStore, AttemptStore, EventStore,
    SettingsStore, OccurrenceQueries,
):
    """Tasks, runs, attempts, events and the receipt journal of one data directory.

    ``clock`` returns Unix milliseconds (injectable for tests). All methods raise
    StorageError/StorageClosedError/StorageBusyError from the underlying Database.
    Implements the ReceiptJournal port (:meth:`register`).
    """

    def __init__(self, db: Database, clock: Callable[[], int] = now_ms) -> None:
        self.db = db
        self.clock = clock
