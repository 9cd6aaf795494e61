"""Log tombstones and history pruning queries (issue 3 item 6; docs/protocols.md §3.8).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository` over its one
``Database``. Every query is bounded by a ``limit``; none touches a file. Schema:
``migrations/sqlite/0003-retention.sql``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from qinglong.local.storage.database import Database

DAY_MS = 86_400_000
MAX_RETENTION_BATCH = 1000


@dataclass(frozen=True, slots=True)
class LogTombstone:
    """A retired attempt log: written before the unlink, ``done_at_ms`` set after it."""

    attempt_id: str
    run_id: str
    retired_at_ms: int
    log_path: str
    reason: str
    done_at_ms: int | None


@dataclass(frozen=True, slots=True)
class LogCandidate:
    """A terminal attempt whose log is older than its task's retention."""

    attempt_id: str
    run_id: str
    log_path: str


@dataclass(frozen=True, slots=True)
class HistoryPruned:
    """Rows deleted by one history batch."""

    runs: int = 0
    attempts: int = 0
    events: int = 0


def _check_limit(limit: int) -> None:
    if type(limit) is not int or not 1 <= limit <= MAX_RETENTION_BATCH:
        raise ValueError("limit must be 1-1000")


def uuid7_bound(ms: int) -> str:
    """The smallest UUIDv7 text of Unix millisecond ``ms`` (``xxxxxxxx-xxxx``): every id made
    earlier sorts below it, so ``id < bound`` is a primary-key range."""
    digits = f"{max(0, ms):012x}"
    return f"{digits[:8]}-{digits[8:12]}"


class RetentionQueries:
    """Tombstones and bounded pruning (mixed into LocalRunRepository)."""

    db: Database
    clock: Callable[[], int]

    # -- log tombstones -------------------------------------------------------------------

    def log_tombstone(self, attempt_id: str) -> LogTombstone | None:
        """The tombstone of the attempt's log, or None if the log was never retired."""
        row = self.db.read(
            lambda c: c.execute(
                "SELECT attempt_id, run_id, retired_at_ms, log_path, reason, done_at_ms"
                " FROM local_log_tombstones WHERE attempt_id = ?",
                (attempt_id,),
            ).fetchone()
        )
        return None if row is None else _tombstone(row)

    def unfinished_tombstones(self, limit: int) -> list[LogTombstone]:
        """Tombstones whose unlink is not confirmed yet (a crash between the steps), oldest
        first, at most ``limit`` (1–1000)."""
        _check_limit(limit)
        return self.db.read(
            lambda c: [
                _tombstone(r)
                for r in c.execute(
                    "SELECT attempt_id, run_id, retired_at_ms, log_path, reason, done_at_ms"
                    " FROM local_log_tombstones WHERE done_at_ms IS NULL"
                    " ORDER BY retired_at_ms, attempt_id LIMIT ?",
                    (limit,),
                )
            ]
        )

    def log_retirement_candidates(
        self, now_ms: int, default_days: int, limit: int
    ) -> list[LogCandidate]:
        """Terminal attempts with a log and no tombstone whose ``finished_at_ms`` is older
        than ``now_ms`` minus their task's ``log_retention_days`` (``default_days`` when
        NULL), oldest first, at most ``limit`` (1–1000)."""
        _check_limit(limit)
        return self.db.read(
            lambda c: [
                LogCandidate(str(r[0]), str(r[1]), str(r[2]))
                for r in c.execute(
                    "SELECT a.id, a.run_id, a.log_path FROM attempts a"
                    " JOIN runs r ON r.id = a.run_id JOIN tasks t ON t.id = r.task_id"
                    " WHERE a.log_path IS NOT NULL AND a.finished_at_ms IS NOT NULL"
                    " AND a.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'lost')"
                    " AND a.finished_at_ms < ?"
                    " AND a.finished_at_ms < ? - coalesce(t.log_retention_days, ?) * ?"
                    " AND NOT EXISTS (SELECT 1 FROM local_log_tombstones l"
                    "                 WHERE l.attempt_id = a.id)"
                    " ORDER BY a.finished_at_ms, a.id LIMIT ?",
                    (now_ms - DAY_MS, now_ms, default_days, DAY_MS, limit),
                )
            ]
        )

    def write_tombstones(
        self, candidates: Sequence[LogCandidate], retired_at_ms: int, reason: str
    ) -> int:
        """Durably record the retirement of each candidate's log BEFORE any unlink (one
        transaction, FULL sync). An existing tombstone is kept. Returns how many were new."""

        def op(conn: sqlite3.Connection) -> int:
            count = 0
            for cand in candidates:
                cur = conn.execute(
                    "INSERT INTO local_log_tombstones (attempt_id, run_id, retired_at_ms,"
                    " log_path, reason) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (cand.attempt_id, cand.run_id, retired_at_ms, cand.log_path, reason),
                )
                count += cur.rowcount
            return count

        return self.db.write(op)

    def finish_tombstones(self, attempt_ids: Sequence[str], done_at_ms: int) -> int:
        """Mark tombstones done after their files were unlinked. Returns rows changed."""

        def op(conn: sqlite3.Connection) -> int:
            return sum(
                conn.execute(
                    "UPDATE local_log_tombstones SET done_at_ms = ?"
                    " WHERE attempt_id = ? AND done_at_ms IS NULL",
                    (done_at_ms, attempt_id),
                ).rowcount
                for attempt_id in attempt_ids
            )

        return self.db.write(op) if attempt_ids else 0

    # -- run history ----------------------------------------------------------------------

    def prune_history(self, cutoff_ms: int, keep_last: int, limit: int) -> HistoryPruned:
        """Delete up to ``limit`` (1–1000) terminal runs finished before ``cutoff_ms``, with
        their attempts, events and tombstones, in one transaction, oldest first.

        Kept: each task's newest ``keep_last`` (>= 1) runs; runs with a receipt journal row
        (the journal is never orphaned, ADR-0069 §3); runs with a log file not yet retired
        (its path lives only in the attempt row: pruning it would orphan the file).
        """
        _check_limit(limit)
        if type(keep_last) is not int or keep_last < 1:
            raise ValueError("keep_last must be >= 1")

        def op(conn: sqlite3.Connection) -> HistoryPruned:
            ids = [
                str(r[0])
                for r in conn.execute(
                    "SELECT r.id FROM runs r"
                    " WHERE r.finished_at_ms IS NOT NULL AND r.finished_at_ms < ?"
                    " AND r.status IN ('succeeded', 'failed', 'cancelled', 'timed_out', 'lost')"
                    " AND r.id < (SELECT k.id FROM runs k WHERE k.task_id = r.task_id"
                    "             ORDER BY k.id DESC LIMIT 1 OFFSET ?)"
                    " AND NOT EXISTS (SELECT 1 FROM local_completion_receipt_journal j"
                    "                 WHERE j.run_id = r.id)"
                    " AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.run_id = r.id"
                    "   AND a.log_path IS NOT NULL AND NOT EXISTS (SELECT 1"
                    "   FROM local_log_tombstones l WHERE l.attempt_id = a.id"
                    "   AND l.done_at_ms IS NOT NULL))"
                    " ORDER BY r.finished_at_ms, r.id LIMIT ?",
                    (cutoff_ms, keep_last - 1, limit),
                )
            ]
            if not ids:
                return HistoryPruned()
            marks = ",".join("?" * len(ids))
            events = conn.execute(
                f"DELETE FROM events WHERE run_id IN ({marks})", ids  # noqa: S608
            ).rowcount
            conn.execute(
                f"DELETE FROM local_log_tombstones WHERE run_id IN ({marks})", ids  # noqa: S608
            )
            attempts = conn.execute(
                f"DELETE FROM attempts WHERE run_id IN ({marks})", ids  # noqa: S608
            ).rowcount
            runs = conn.execute(f"DELETE FROM runs WHERE id IN ({marks})", ids).rowcount  # noqa: S608
            return HistoryPruned(runs, attempts, events)

        return self.db.write(op)

    def prune_task_events(self, cutoff_ms: int, limit: int) -> int:
        """Delete up to ``limit`` (1–1000) task-level events (no run) older than
        ``cutoff_ms``, oldest first (for example ``slot_skipped`` of policy ``forbid``, one
        per due slot). Returns how many were deleted."""
        _check_limit(limit)

        def op(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE id < ?"
                " AND run_id IS NULL AND at_ms < ? ORDER BY id LIMIT ?)",
                (uuid7_bound(cutoff_ms), cutoff_ms, limit),
            ).rowcount

        return self.db.write(op)


def _tombstone(row: Sequence[object]) -> LogTombstone:
    return LogTombstone(
        attempt_id=str(row[0]),
        run_id=str(row[1]),
        retired_at_ms=int(str(row[2])),
        log_path=str(row[3]),
        reason=str(row[4]),
        done_at_ms=None if row[5] is None else int(str(row[5])),
    )
