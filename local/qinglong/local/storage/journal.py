"""Keyset pages of the receipt cleanup journal (ADR-0069 §3–§4, docs/protocols.md §3.5).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository`: the queries run
on the repository's one ``Database`` (one connection, the serial queue, the close fence).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from qinglong.local.storage.database import Database
from qinglong.shared.statuses import AttemptStatus

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
    """Journal paging and quarantine resolution (mixed into LocalRunRepository)."""

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
