"""The exactly-once verdict on a task's occurrence ledger (docs/protocols.md §4.2), shared by
the cluster tests: read the ledger, the runs and their ``created`` events in one snapshot,
then check that every slot from the first to the last has exactly one outcome and every
``run_created`` row is exactly one run of that slot."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from cluster_kit import Cluster

SECOND = timedelta(seconds=1)


def read_ledger(cluster: Cluster, task_id: str) -> dict[str, Any]:
    """The task's ledger rows (outcome, first_slot, last_slot, slot_count, run_id), runs (id,
    scheduled_for), ``created`` run events and the task's ``created_at``, read in one
    REPEATABLE READ snapshot as the schema owner."""
    with cluster.db.connect() as conn:
        conn.autocommit = False
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        occurrences = conn.execute(
            "SELECT outcome, first_slot, last_slot, slot_count, run_id::text"
            " FROM occurrences WHERE task_id = %s ORDER BY first_slot", (task_id,)).fetchall()
        runs = conn.execute(
            "SELECT id::text, scheduled_for FROM runs WHERE task_id = %s",
            (task_id,)).fetchall()
        created_events = conn.execute(
            "SELECT e.run_id::text FROM events e JOIN runs r ON r.id = e.run_id"
            " WHERE r.task_id = %s AND e.kind = 'created'", (task_id,)).fetchall()
        created_at, = conn.execute("SELECT created_at FROM tasks WHERE id = %s",
                                   (task_id,)).fetchone() or (None,)
        conn.rollback()
    return {"occurrences": occurrences, "runs": runs, "created_at": created_at,
            "created_events": [e[0] for e in created_events]}


def assert_every_slot_once(ledger: dict[str, Any], stopped_at: datetime,
                           min_slots: int) -> Counter[str]:
    """The exactly-once verdict on ``read_ledger``'s answer: every slot from the first after
    the task was created to the last (no earlier than ``stopped_at`` - 5 s) has exactly one
    outcome, at least ``min_slots`` slots; one run per ``run_created`` slot. Returns the slot
    count by outcome; AssertionError naming the first offending slots."""
    slots: Counter[datetime] = Counter()
    outcomes: Counter[str] = Counter()
    for outcome, first, last, count, run_id in ledger["occurrences"]:
        span = int((last - first) / SECOND) + 1
        assert first.microsecond == 0 and last.microsecond == 0, (first, last)
        assert count == span, f"{outcome} row {first}..{last} counts {count} slots, spans {span}"
        assert (run_id is not None) == (outcome == "run_created")
        for i in range(span):
            slots[first + i * SECOND] += 1
        outcomes[outcome] += count
    twice = sorted(s.isoformat() for s, n in slots.items() if n > 1)
    assert not twice, f"slots with more than one outcome: {twice[:10]}"
    first_slot, last_slot = min(slots), max(slots)
    expected = int((last_slot - first_slot) / SECOND) + 1
    missing = [(first_slot + i * SECOND).isoformat() for i in range(expected)
               if first_slot + i * SECOND not in slots]
    assert not missing, f"slots without an outcome: {missing[:10]}"
    # the ledger starts at the first slot after the task was created and is live to the end
    created_at = ledger["created_at"]
    assert first_slot == created_at.replace(microsecond=0) + SECOND, (first_slot, created_at)
    assert last_slot >= stopped_at - timedelta(seconds=5), (last_slot, stopped_at)
    assert expected >= min_slots, expected

    # runs: one per slot (never two for one slot), each the run of exactly one run_created
    run_slots = Counter(r[1] for r in ledger["runs"])
    assert all(n == 1 for n in run_slots.values()), run_slots.most_common(3)
    created_rows = {o[4]: o[1] for o in ledger["occurrences"] if o[0] == "run_created"}
    assert {r[0]: r[1] for r in ledger["runs"]} == created_rows
    assert sorted(ledger["created_events"]) == sorted(r[0] for r in ledger["runs"])
    return outcomes
