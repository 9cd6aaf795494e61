"""The receipt cleanup journal: its rows and their keyset pages (ADR-0069 §3–§4,
docs/protocols.md §3.5).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository`: the queries run
on the repository's one ``Database`` (one connection, the serial queue, the close fence).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from qinglong.local.storage.database import Database
from qinglong.local.storage.event_store import insert_event
from qinglong.shared.errors import ConflictError, NotFoundError
from qinglong.shared.statuses import AttemptStatus, Executor

MAX_JOURNAL_PAGE = 64  # ADR-0069 §6: the page is hard-capped at 64 rows

Position = tuple[int, str]
"""A keyset position: ``(updated_at_ms, attempt_id)``."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One journal row joined with its attempt.

    ``state`` is ``pending`` or ``quarantined``; ``quarantine_path``/``purge_at_ms`` (Unix ms)
    are set only once a quarantine intent was persisted. ``updated_at_ms`` is the row's,
    ``attempt_updated_at_ms`` the attempt's last transition (its terminal commit, once it
    is terminal).
    """

    attempt_id: str
    run_id: str
    state: str
    receipt_path: str
    quarantine_path: str | None
    purge_at_ms: int | None
    updated_at_ms: int
    attempt_status: AttemptStatus
    attempt_updated_at_ms: int

    @property
    def position(self) -> Position:
        """This row's keyset position ``(updated_at_ms, attempt_id)``."""
        return (self.updated_at_ms, self.attempt_id)


class JournalPage(NamedTuple):
    """``rows`` in ``(updated_at_ms, attempt_id)`` order; ``truncated`` when more follow."""

    rows: tuple[JournalEntry, ...]
    truncated: bool


_PAGE_SQL = (
    "SELECT j.attempt_id, j.run_id, j.state, j.receipt_path, j.quarantine_path, j.purge_at_ms,"
    " j.updated_at_ms, a.status, a.updated_at_ms"
    " FROM local_completion_receipt_journal j JOIN attempts a ON a.id = j.attempt_id"
)


def _entry(row: tuple[object, ...]) -> JournalEntry:
    return JournalEntry(
        attempt_id=str(row[0]),
        run_id=str(row[1]),
        state=str(row[2]),
        receipt_path=str(row[3]),
        quarantine_path=None if row[4] is None else str(row[4]),
        purge_at_ms=None if row[5] is None else int(str(row[5])),
        updated_at_ms=int(str(row[6])),
        attempt_status=AttemptStatus(str(row[7])),
        attempt_updated_at_ms=int(str(row[8])),
    )


class ReceiptJournalQueries:
    """The receipt journal: registration before the spawn (the ReceiptJournal port),
    quarantine intents, paging and resolution (mixed into LocalRunRepository)."""

    db: Database
    clock: Callable[[], int]

    def journal_page(self, after: Position | None, limit: int) -> JournalPage:
        """One keyset page of the journal after ``after`` (exclusive), each row with its
        attempt's status; fetched with ``limit + 1`` to set ``truncated``.

        ADR-0069 §4: one indexed range read (``local_completion_receipt_journal_page``);
        an empty journal costs exactly this one query. Raises ValueError unless
        1 <= limit <= 64, StorageError from the store.
        """
        if type(limit) is not int or not 1 <= limit <= MAX_JOURNAL_PAGE:
            raise ValueError("limit must be 1-64")

        def op(conn: sqlite3.Connection) -> JournalPage:
            order = " ORDER BY j.updated_at_ms, j.attempt_id LIMIT ?"
            if after is None:
                rows = conn.execute(_PAGE_SQL + order, (limit + 1,)).fetchall()
            else:
                rows = conn.execute(
                    _PAGE_SQL + " WHERE (j.updated_at_ms, j.attempt_id) > (?, ?)" + order,
                    (int(after[0]), str(after[1]), limit + 1),
                ).fetchall()
            return JournalPage(tuple(_entry(r) for r in rows[:limit]), len(rows) > limit)

        return self.db.read(op)

    def resolve_quarantined(self, attempt_id: str, now_ms: int) -> bool:
        """Delete a ``quarantined`` row whose purge time has come (ADR-0069 §4: after the
        quarantined file was purged). False if there is no such row: a row re-quarantined
        with a later purge time meanwhile, or one already resolved, stays as it is."""

        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM local_completion_receipt_journal WHERE attempt_id = ?"
                " AND state = 'quarantined' AND purge_at_ms <= ?",
                (attempt_id, now_ms),
            )
            return cur.rowcount == 1

        return self.db.write(op)

    def register(self, run_id: str, attempt_id: str, receipt_path: str) -> None:
        """ReceiptJournal port (ADR-0069 §3): record ``pending`` before the spawn.

        Only for an existing ``local_process`` attempt of that run; the same call twice is
        idempotent; a different path for the same attempt raises ConflictError.
        """
        at = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            row = conn.execute(
                "SELECT run_id, executor FROM attempts WHERE id = ?", (attempt_id,)
            ).fetchone()
            if row is None or row[0] != run_id or row[1] != Executor.LOCAL_PROCESS.value:
                raise NotFoundError("no local_process attempt of that run")
            existing = conn.execute(
                "SELECT run_id, receipt_path FROM local_completion_receipt_journal"
                " WHERE attempt_id = ?",
                (attempt_id,),
            ).fetchone()
            if existing is not None:
                if tuple(existing) != (run_id, receipt_path):
                    raise ConflictError("the attempt is registered with another receipt")
                return
            conn.execute(
                "INSERT INTO local_completion_receipt_journal (attempt_id, run_id, state,"
                " receipt_path, created_at_ms, updated_at_ms) VALUES (?, ?, 'pending', ?, ?, ?)",
                (attempt_id, run_id, receipt_path, at, at),
            )

        self.db.write(op)

    def resolve_journal(self, attempt_id: str) -> bool:
        """Delete the ``pending`` journal row of a settled attempt (after its receipt file is
        gone). A ``quarantined`` row stays: only the cleanup scanner resolves it, after the
        purge, so the quarantined file is never orphaned (ADR-0069 §4)."""
        def op(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "DELETE FROM local_completion_receipt_journal WHERE attempt_id = ?"
                " AND state = 'pending'",
                (attempt_id,),
            )
            return cur.rowcount == 1

        return self.db.write(op)

    def journal_quarantine(
        self, run_id: str, attempt_id: str, quarantine_path: str, purge_at_ms: int
    ) -> None:
        """Persist the quarantine intent of an invalid receipt BEFORE it is moved
        (ADR-0069 §3): state ``quarantined`` with its deterministic path and purge time.
        Idempotent; creates the row if the attempt was never registered."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE local_completion_receipt_journal SET state = 'quarantined',"
                " quarantine_path = ?, purge_at_ms = ?, updated_at_ms = ? WHERE attempt_id = ?",
                (quarantine_path, purge_at_ms, at, attempt_id),
            )
            if cur.rowcount == 0:
                conn.execute(
                    "INSERT INTO local_completion_receipt_journal (attempt_id, run_id, state,"
                    " receipt_path, quarantine_path, purge_at_ms, created_at_ms, updated_at_ms)"
                    " VALUES (?, ?, 'quarantined', '', ?, ?, ?, ?)",
                    (attempt_id, run_id, quarantine_path, purge_at_ms, at, at),
                )
            insert_event(conn, at, "receipt_quarantined", run_id=run_id, attempt_id=attempt_id,
                   detail={"purge_at_ms": purge_at_ms})

        self.db.write(op)

    def journal_rows(self) -> list[tuple[str, str, str]]:
        """(attempt_id, state, receipt_path) of every journal row (diagnostics, tests)."""
        return self.db.read(
            lambda c: [
                (str(a), str(s), str(p))
                for a, s, p in c.execute(
                    "SELECT attempt_id, state, receipt_path FROM local_completion_receipt_journal"
                    " ORDER BY updated_at_ms, attempt_id"
                )
            ]
        )
