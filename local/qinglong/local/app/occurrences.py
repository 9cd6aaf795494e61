"""The socket op ``task_occurrences``: a task's schedule slots with their outcomes, newest
first, keyset paged (docs/protocols.md §3.8; the panel's Occurrences page, docs/panel.md).

Each slot-outcome event (``storage/occurrence_queries.py``) becomes one entry in the shape
of the cluster's occurrence ledger (docs/protocols.md §4.2), so the panel renders both
profiles alike:

``{"id", "outcome", "reason", "first_slot", "last_slot", "slot_count", "at_least",
"run", "recorded_at"}``: ``outcome`` is ``run_created``, ``skipped_active``,
``backlog_full``, ``coalesced`` (the slots joined the queued run in ``run``) or
``skipped_downtime`` (slots missed while nothing ran them, or passed by a forward clock
step: ``reason`` ``misfire`` or ``clock_step``); slots are ISO UTC (None when an old event
did not name them); ``at_least``: the count was capped; ``run``: ``{"id", "number",
"status"}`` or None.
"""

from __future__ import annotations

from typing import Any

from qinglong.local.app.views import iso
from qinglong.local.storage.occurrence_queries import MAX_OCCURRENCES_PAGE, SlotOutcomeRow
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import validate_uuid7


def task_occurrences(repo: LocalRunRepository, name: str, before: str | None,
                     limit: int) -> dict[str, Any]:
    """One page of the live task ``name``'s slot outcomes, newest first: ``{"task": {"name",
    "schedule", "timezone", "enabled"}, "items": [entry], "next": cursor or None}`` (pass
    ``next`` as ``before`` for the older page). NotFoundError for no live task of that name;
    ValidationError for ``limit`` outside 1-200 or a ``before`` that is not a UUIDv7."""
    if not 1 <= limit <= MAX_OCCURRENCES_PAGE:
        raise ValidationError("request", f"limit must be 1-{MAX_OCCURRENCES_PAGE}")
    if before is not None:
        validate_uuid7(before, "before")  # InvalidIdentifierError is a ValidationError
    task = repo.get_task(name)
    rows = repo.slot_outcomes(task.id, before, limit + 1)
    page = rows[:limit]
    return {"task": {"name": task.name, "schedule": task.schedule,
                     "timezone": task.timezone, "enabled": task.enabled},
            "items": [occurrence_view(row) for row in page],
            "next": page[-1].id if len(rows) > limit else None}


def occurrence_view(row: SlotOutcomeRow) -> dict[str, Any]:
    """One entry (see the module docstring) of a slot-outcome event."""
    detail = row.detail
    run = None if row.run_id is None else {
        "id": row.run_id, "number": row.run_number, "status": row.run_status}
    entry: dict[str, Any] = {"id": row.id, "reason": None, "at_least": False, "run": run,
                             "recorded_at": iso(row.at_ms)}
    if row.kind == "run_created":
        slot = _ms(detail.get("scheduled_at_ms"))
        return {**entry, "outcome": "run_created", "first_slot": iso(slot),
                "last_slot": iso(slot), "slot_count": 1}
    if row.kind == "slots_skipped":
        first = _ms(detail.get("first_missed_ms"))
        last = _ms(detail.get("last_missed_ms"))
        return {**entry, "outcome": "skipped_downtime", "reason": detail.get("reason"),
                "first_slot": iso(first), "last_slot": iso(last if last is not None else first),
                "slot_count": int(detail.get("skipped") or 0),
                "at_least": bool(detail.get("at_least"))}
    first = _ms(detail.get("slot_ms"))
    last = _ms(detail.get("last_slot_ms"))
    outcome = "coalesced" if row.kind == "slot_coalesced" else str(detail.get("reason"))
    return {**entry, "outcome": outcome, "first_slot": iso(first),
            "last_slot": iso(last if last is not None else first),
            "slot_count": int(detail.get("count") or 1)}


def _ms(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
