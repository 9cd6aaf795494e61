"""Slot admission and dispatch candidates (docs/protocols.md §3.7, issue 10 item 4).

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository`: the queries run
on the repository's one ``Database`` (one connection, the serial queue, the close fence).

Slot outcomes use the names of the cluster's occurrence ledger (docs/protocols.md §4.2) as stable
reason codes. A slot that creates no run is recorded as a task-level event (``run_id``
NULL): kind ``slot_skipped`` (reason ``skipped_active`` or ``backlog_full``) or
``slot_coalesced`` (reason ``coalesced``, the queued run in ``detail.run_id``). Consecutive
outcomes of one task with the same kind and reason (and the same queued run) update the
latest such event instead of adding one: ``detail`` = ``{"slot_ms": first slot,
"last_slot_ms": latest slot, "count": slots, "reason", "policy"}`` and ``at_ms`` moves to
the latest record, so an every-second task skipped for an hour writes one row, not 3,600.
A run created, a misfire skip or an enable/disable in between starts a new event.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from qinglong.local.storage.database import Database
from qinglong.local.storage.rows import (
    EVENT_COLUMNS,
    RUN_COLUMNS,
    load_attempts,
    load_run,
    run_from_row,
)
from qinglong.local.storage.run_numbers import next_run_number
from qinglong.shared.domain import Run, Trigger
from qinglong.shared.ids import uuid7

MAX_DISPATCH_CANDIDATES = 256
"""Upper bound of :meth:`DispatchQueries.startable_due`'s ``limit``."""

# events that end a streak of equal slot outcomes (one task's slot history)
_STREAK_KINDS = ("run_created", "slot_skipped", "slot_coalesced", "slots_skipped",
                 "task_enabled", "task_disabled")


class SlotReason(StrEnum):
    """Outcome of one due slot (or manual request): occurrence-ledger names, §4.2."""

    RUN_CREATED = "run_created"
    SKIPPED_ACTIVE = "skipped_active"  # forbid: a run of the task is dispatching/running
    BACKLOG_FULL = "backlog_full"  # allow: the task already has its bound of queued runs
    COALESCED = "coalesced"  # forbid: served by the task's queued run, which has not started
    SLOT_TAKEN = "slot_taken"  # (task, slot) already has a run: fired before, nothing recorded


@dataclass(frozen=True, slots=True)
class SlotState:
    """What the policy sees of one task, read in the admitting transaction.

    ``active``: runs in dispatching/running; ``queued``: runs in queued (not started, or
    waiting for a retry's ``not_before``); ``oldest_queued_id``: the first of those, or None.
    """

    active: int
    queued: int
    oldest_queued_id: str | None


@dataclass(frozen=True, slots=True)
class SlotOutcome:
    """``reason``; ``run``: the run created (``run_created``) or the queued run the slot
    coalesced into (``coalesced``), else None."""

    reason: SlotReason
    run: Run | None

    @property
    def run_created(self) -> bool:
        """True when this admission queued a new run."""
        return self.reason is SlotReason.RUN_CREATED


class DispatchQueries:
    """Atomic slot admission and round-robin candidates (mixed into LocalRunRepository)."""

    db: Database
    clock: Callable[[], int]

    def admit_run(
        self,
        task_id: str,
        trigger: Trigger,
        slot_ms: int | None,
        decide: Callable[[SlotState], SlotReason],
        policy: str,
    ) -> SlotOutcome:
        """In one write transaction: read the task's :class:`SlotState`, ask ``decide``,
        then queue a run (``run_created``), or record the outcome as a task event (only when
        ``slot_ms``, Unix ms, is given: a manual request has no slot). A slot that already
        has a run, or that the task's latest outcome event already covers (a tick that
        stopped between this commit and the cursor's), or of a task disabled or removed
        meanwhile, answers ``slot_taken`` and records nothing: a slot is handled once.
        ``policy`` is written into the event detail. Raises
        StorageError and friends from the Database (docs/protocols.md §3.7, issue 10 item 4)."""
        at = self.clock()

        def op(conn: sqlite3.Connection) -> SlotOutcome:
            if slot_ms is not None and (_slot_already_handled(conn, task_id, slot_ms)
                                        or not _task_live_and_enabled(conn, task_id)):
                return SlotOutcome(SlotReason.SLOT_TAKEN, None)
            state = _slot_state(conn, task_id)
            reason = decide(state)
            if reason is SlotReason.RUN_CREATED:
                run = _insert_run(conn, at, task_id, trigger, slot_ms)
                return SlotOutcome(reason if run else SlotReason.SLOT_TAKEN, run)
            into = state.oldest_queued_id if reason is SlotReason.COALESCED else None
            if slot_ms is not None and reason is not SlotReason.SLOT_TAKEN:
                kind = "slot_coalesced" if into else "slot_skipped"
                _record_outcome(conn, at, task_id, kind, reason.value, slot_ms, policy, into)
            return SlotOutcome(reason, None if into is None else load_run(conn, into))

        return self.db.write(op)

    def slot_has_run(self, task_id: str, slot_ms: int) -> bool:
        """Whether (task, slot ``slot_ms``, Unix ms) already has a run (index
        ``runs_task_slot``). Raises StorageError and friends."""
        return self.db.read(lambda conn: conn.execute(
            "SELECT 1 FROM runs WHERE task_id = ? AND scheduled_at_ms = ?", (task_id, slot_ms)
        ).fetchone() is not None)

    def startable_due(self, now_ms: int, limit: int, per_task: int = 1) -> list[Run]:
        """Queued runtime-owned runs due at ``now_ms`` (Unix ms) whose task may start one
        now (policy ``allow``, or no run of the task in dispatching/running): each task's
        ``per_task`` oldest due runs, oldest due first, at most ``limit`` (1–256, else
        ValueError). The per-task window keeps one task's long backlog (manual runs are not
        bounded) from hiding every other task's due run. Raises StorageError and friends."""
        if not 1 <= limit <= MAX_DISPATCH_CANDIDATES:
            raise ValueError(f"limit must be 1-{MAX_DISPATCH_CANDIDATES}")

        def op(conn: sqlite3.Connection) -> list[Run]:
            rows = conn.execute(
                "WITH due AS (SELECT r.id, ROW_NUMBER() OVER (PARTITION BY r.task_id"  # noqa: S608
                "  ORDER BY r.not_before_ms, r.id) AS turn"
                "  FROM runs r JOIN tasks t ON t.id = r.task_id"
                "  WHERE r.status = 'queued' AND r.owner = 'runtime' AND r.not_before_ms <= ?"
                "  AND (t.concurrency = 'allow' OR NOT EXISTS (SELECT 1 FROM runs x"
                "   WHERE x.task_id = r.task_id AND x.status IN ('dispatching', 'running')"
                "   AND x.owner = 'runtime')))"
                f" SELECT {RUN_COLUMNS} FROM due JOIN runs r ON r.id = due.id"
                " JOIN tasks t ON t.id = r.task_id WHERE due.turn <= ?"
                " ORDER BY r.not_before_ms, r.id LIMIT ?",
                (now_ms, max(1, per_task), limit),
            ).fetchall()
            attempts = load_attempts(conn, [str(row[0]) for row in rows])
            return [run_from_row(row, tuple(attempts[str(row[0])])) for row in rows]

        return self.db.read(op)


def _slot_already_handled(conn: sqlite3.Connection, task_id: str, slot_ms: int) -> bool:
    """(task, slot) has a run (index ``runs_task_slot``), or the task's latest outcome event
    covers the slot (it was recorded, then the tick stopped before advancing the cursor)."""
    if conn.execute("SELECT 1 FROM runs WHERE task_id = ? AND scheduled_at_ms = ?",
                    (task_id, slot_ms)).fetchone() is not None:
        return True
    last = _latest_streak_event(conn, task_id)
    if last is None or last[1] not in ("slot_skipped", "slot_coalesced") or last[2] is None:
        return False
    detail = json.loads(str(last[2]))
    first = int(detail.get("slot_ms", 0))
    return first <= slot_ms <= int(detail.get("last_slot_ms", first))


def _task_live_and_enabled(conn: sqlite3.Connection, task_id: str) -> bool:
    """Read in the admitting transaction: a tick that read the task as due before a
    ``disable`` or ``rm`` committed must not queue a run after it."""
    return conn.execute("SELECT 1 FROM tasks WHERE id = ? AND enabled = 1"
                        " AND deleted_at_ms IS NULL", (task_id,)).fetchone() is not None


def _latest_streak_event(conn: sqlite3.Connection, task_id: str) -> tuple[object, ...] | None:
    """(id, kind, detail) of the task's newest event of a kind in ``_STREAK_KINDS``."""
    marks = ",".join("?" * len(_STREAK_KINDS))
    row = conn.execute(
        f"SELECT id, kind, detail FROM events WHERE task_id = ? AND kind IN ({marks})"  # noqa: S608
        " ORDER BY id DESC LIMIT 1",
        (task_id, *_STREAK_KINDS),
    ).fetchone()
    return None if row is None else tuple(row)


def _slot_state(conn: sqlite3.Connection, task_id: str) -> SlotState:
    # each query states the condition of the partial index runs_task_unfinished (migration
    # 0004): SQLite uses a partial index only then, and would otherwise walk the task's
    # whole history through runs_task_created
    active = conn.execute(
        "SELECT count(*) FROM runs WHERE task_id = ? AND status IN ('dispatching', 'running')"
        " AND owner = 'runtime' AND status IN ('queued', 'dispatching', 'running')",
        (task_id,),
    ).fetchone()
    queued = conn.execute(
        "SELECT count(*), min(id) FROM runs WHERE task_id = ? AND status = 'queued'"
        " AND status IN ('queued', 'dispatching', 'running')",
        (task_id,),
    ).fetchone()
    return SlotState(int(active[0]), int(queued[0]), None if queued[1] is None else str(queued[1]))


def _insert_run(
    conn: sqlite3.Connection, at: int, task_id: str, trigger: Trigger, slot_ms: int | None
) -> Run | None:
    run_id = uuid7()
    cur = conn.execute(
        "INSERT INTO runs (id, task_id, trigger, status, scheduled_at_ms, not_before_ms,"
        " created_at_ms, updated_at_ms, number) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?)"
        " ON CONFLICT DO NOTHING",
        (run_id, task_id, trigger.value, slot_ms, at, at, at, next_run_number(conn, task_id)),
    )
    if cur.rowcount == 0:
        return None
    detail = {"trigger": trigger.value, "scheduled_at_ms": slot_ms}
    _insert_event(conn, at, "run_created", task_id, run_id, detail, to_status="queued")
    return load_run(conn, run_id)


def _insert_event(
    conn: sqlite3.Connection, at: int, kind: str, task_id: str, run_id: str | None,
    detail: Mapping[str, object], to_status: str | None = None,
) -> None:
    conn.execute(
        f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?)",  # noqa: S608
        (uuid7(), at, kind, task_id, run_id, to_status, json.dumps(detail, sort_keys=True)),
    )


def _record_outcome(
    conn: sqlite3.Connection, at: int, task_id: str, kind: str, reason: str, slot_ms: int,
    policy: str, into: str | None,
) -> None:
    last = _latest_streak_event(conn, task_id)
    if last is not None and last[1] == kind and last[2] is not None:
        detail = json.loads(str(last[2]))
        # merge only a later slot: a slot re-evaluated after a backward clock step must not
        # stretch the range backwards (``slot_was_handled`` reads [slot_ms, last_slot_ms])
        newest = int(detail.get("last_slot_ms", detail.get("slot_ms", 0)))
        if detail.get("reason") == reason and detail.get("run_id") == into and slot_ms > newest:
            detail["last_slot_ms"] = slot_ms
            detail["count"] = int(detail.get("count", 1)) + 1
            conn.execute(
                "UPDATE events SET at_ms = ?, detail = ? WHERE id = ?",
                (at, json.dumps(detail, sort_keys=True), last[0]),
            )
            return
    detail = {"slot_ms": slot_ms, "last_slot_ms": slot_ms, "count": 1, "reason": reason,
              "policy": policy}
    if into is not None:
        detail["run_id"] = into
    _insert_event(conn, at, kind, task_id, None, detail)
