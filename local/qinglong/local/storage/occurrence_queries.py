"""A task's slot outcomes, newest first: the local profile's occurrence timeline (the panel's
Occurrences page, docs/panel.md "Pages"; docs/protocols.md §3.7 and §4.2).

The local profile has no ledger table: a slot's outcome is an event of the task
(``storage/dispatch_queries.py``): ``run_created`` for a scheduled run (its detail's
``scheduled_at_ms`` is the slot; a manual run has none and is not a slot), ``slot_skipped``
and ``slot_coalesced`` (a merged range of slots), ``slots_skipped`` (slots missed: downtime
or a forward clock step). They are read here through the index ``events_task``
(``task_id, id``), keyset by event id.

A mixin of :class:`~qinglong.local.storage.repository.LocalRunRepository`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from qinglong.local.storage.database import Database

SLOT_KINDS = ("run_created", "slot_skipped", "slot_coalesced", "slots_skipped")
MAX_OCCURRENCES_PAGE = 200


@dataclass(frozen=True, slots=True)
class SlotOutcomeRow:
    """One slot-outcome event: ``id`` (the event's UUIDv7, the keyset cursor), ``kind`` (one
    of :data:`SLOT_KINDS`), ``at_ms`` (when it was recorded or last extended, Unix ms),
    ``detail`` (its JSON object), and the run it names (``run_created``'s run, or the queued
    run a ``slot_coalesced`` range joined): ``run_id``, ``run_number``, ``run_status``
    (None without one, or for a run pruned since)."""

    id: str
    kind: str
    at_ms: int
    detail: dict[str, Any]
    run_id: str | None
    run_number: int | None
    run_status: str | None


class OccurrenceQueries:
    """Reads of slot outcomes (mixin; needs the repository's ``db``)."""

    db: Database

    def slot_outcomes(self, task_id: str, before: str | None, limit: int) -> list[SlotOutcomeRow]:
        """At most ``limit`` (1-200, else ValueError) slot outcomes of ``task_id``, newest
        first, those with an event id below ``before`` (None: from the newest). Raises
        StorageError and friends from the Database."""
        if not 1 <= limit <= MAX_OCCURRENCES_PAGE:
            raise ValueError(f"limit must be 1-{MAX_OCCURRENCES_PAGE}")
        marks = ",".join("?" * len(SLOT_KINDS))

        def op(conn: sqlite3.Connection) -> list[SlotOutcomeRow]:
            rows = conn.execute(
                "SELECT e.id, e.kind, e.at_ms, e.detail, r.id, r.number, r.status"  # noqa: S608
                " FROM events e LEFT JOIN runs r"
                " ON r.id = coalesce(e.run_id, json_extract(e.detail, '$.run_id'))"
                f" WHERE e.task_id = ? AND e.kind IN ({marks})"
                " AND (e.kind <> 'run_created'"
                "  OR json_extract(e.detail, '$.scheduled_at_ms') IS NOT NULL)"
                " AND (? IS NULL OR e.id < ?)"
                " ORDER BY e.id DESC LIMIT ?",
                (task_id, *SLOT_KINDS, before, before, limit),
            ).fetchall()
            return [SlotOutcomeRow(
                id=str(row[0]), kind=str(row[1]), at_ms=int(row[2]),
                detail=dict(json.loads(str(row[3]))) if row[3] else {},
                run_id=None if row[4] is None else str(row[4]),
                run_number=None if row[5] is None else int(row[5]),
                run_status=None if row[6] is None else str(row[6]),
            ) for row in rows]

        return self.db.read(op)
