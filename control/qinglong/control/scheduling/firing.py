"""Firing one due task inside a tick (docs/protocols.md §4.2, §3.7 for the slot rules);
``run_now`` applies the same concurrency policy to the API's run now.

The task row is locked by the tick's due read. Slots from ``next_fire_at`` up to the
database's now() are computed with the shared cron module in the task's time zone:

1. the latest slot fires when it is at most ``catchup_grace_s`` old; every earlier slot (and
   the latest too when beyond the grace) is ``skipped_downtime``, one compact ledger row;
2. the firing slot follows the task's concurrency policy: ``forbid`` with a run queued,
   dispatching or running => ``skipped_active``; ``allow`` with ``backlog_limit`` runs queued
   => ``backlog_full``; ``replace`` => create the run, then end the older queued runs
   ``cancelled`` and set ``cancel_requested_at`` on the older dispatching or running ones
   (one run event each); else ``create_run`` and a ``run_created`` row;
3. ``next_fire_at`` moves to the first slot after now by compare-and-set on the
   ``schedule_version`` read.

Everything commits in the tick's transaction. The dispatch side refuses to claim a run of a
``replace`` task while an older run of it is dispatching or running, so the new run starts
only after the old group is gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from qinglong.control.db.engine import run_named
from qinglong.control.scheduling.errors import RunRefusedError
from qinglong.control.scheduling.ledger import from_ms, record_run_created, record_skips, to_ms
from qinglong.control.scheduling.next_fire import advance, cron_schedule
from qinglong.control.scheduling.run_creation import (
    CreatedRun,
    create_run,
    created_run,
    locked_task,
    queries,
)
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection, RowMapping

    from qinglong.shared.cron import Schedule


def fire_due_task(conn: Connection, task: RowMapping, *, backlog_limit: int,
                  slot_scan_limit: int) -> Counter[str]:
    """Handle one due, locked task row (the ``due_tasks`` columns) in ``conn``'s transaction.

    Returns slot counts by outcome (``run_created``, ``skipped_active``, ``backlog_full``,
    ``skipped_downtime``; ``already_served`` when the slot had a run; ``unschedulable`` for a
    task whose stored schedule has no slots). At most ``slot_scan_limit`` downtime slots are
    counted per call: a longer backlog is recorded in parts, the task staying due and its
    next part merged into the same row by the next tick. Raises ScheduleAdvanceLostError and
    the database's errors; the caller rolls the task's work back.
    """
    counts: Counter[str] = Counter()
    task_id, version = str(task["id"]), int(task["schedule_version"])
    try:
        schedule = cron_schedule(task["schedule"], task["timezone"])
    except ValidationError:
        schedule = None
    if schedule is None:  # edited to manual-only or unparsable: nothing fires
        advance(conn, task_id, version, None)
        counts["unschedulable"] += 1
        return counts
    now_ms, cursor_ms = to_ms(task["db_now"]), to_ms(task["next_fire_at"])
    latest = schedule.latest_slot_at_or_before(now_ms)
    fire = None
    if latest is not None and latest >= cursor_ms:
        fire = latest if now_ms - latest <= int(task["catchup_grace_s"]) * 1000 else None
        end = latest if fire is None else latest - 1
        last = _record_downtime(conn, schedule, task_id, cursor_ms - 1, end, slot_scan_limit,
                                counts)
        if last is not None:  # more downtime than one call counts: continue next tick
            advance(conn, task_id, version, schedule.next_slot_after(last))
            return counts
    if fire is not None:
        counts[_fire_slot(conn, schedule, task, fire, backlog_limit)] += 1
    advance(conn, task_id, version, schedule.next_slot_after(now_ms))
    return counts


def _record_downtime(conn: Connection, schedule: Schedule, task_id: str, after_ms: int,
                     until_ms: int, limit: int, counts: Counter[str]) -> int | None:
    """Record slots in (after, until] as ``skipped_downtime``; returns the last slot recorded
    when ``limit`` cut the range short, else None."""
    first = last = None
    n, cut = 0, False
    for slot in schedule.slots_between(after_ms, until_ms):
        if n == limit:
            cut = True
            break
        first = slot if first is None else first
        last, n = slot, n + 1
    if first is not None and last is not None:
        record_skips(conn, schedule, task_id, "skipped_downtime", from_ms(first),
                     from_ms(last), n)
        counts["skipped_downtime"] += n
    return last if cut else None


def cancel_queued(conn: Connection, run_id: str, *, reason: str,
                  by_run: str | None = None) -> bool:
    """End a still-queued run ``cancelled`` now (its event, its earlier attempts' logs
    enrolled for retention), in the caller's transaction; False when it is no longer queued.
    A queued run only marked ``cancel_requested_at`` would still be claimed and started
    (nothing tells a worker before its first heartbeat), so a queued run is never left so."""
    from qinglong.control.retention.enrollment import enroll_run

    done = run_named(conn, queries()["cancel_queued"], {
        "run_id": run_id, "event_id": uuid7(), "reason": reason, "by_run": by_run}).first()
    if done is None:
        return False
    enroll_run(conn, run_id)
    return True


def _fire_slot(conn: Connection, schedule: Schedule, task: RowMapping, slot_ms: int,
               backlog_limit: int) -> str:
    """Apply the concurrency policy to the firing slot; returns its outcome."""
    task_id, policy, slot = str(task["id"]), str(task["concurrency_policy"]), from_ms(slot_ms)
    active = run_named(conn, queries()["active_runs"], {"task_id": task_id}).mappings().all()
    if policy == "forbid" and active:
        record_skips(conn, schedule, task_id, "skipped_active", slot, slot, 1)
        return "skipped_active"
    if policy == "allow" and sum(r["status"] == "queued" for r in active) >= backlog_limit:
        record_skips(conn, schedule, task_id, "backlog_full", slot, slot, 1)
        return "backlog_full"
    run = create_run(conn, task_id=task_id, trigger="schedule", scheduled_for=slot,
                     task_locked=True)  # the tick's due read locked the live row
    if run is None:  # the slot has its run already (and its ledger row): nothing to add
        return "already_served"
    record_run_created(conn, task_id, slot, run.run_id)
    if policy == "replace":
        replace_active_runs(conn, active, by_run=run.run_id)
    return "run_created"


def replace_active_runs(conn: Connection, active: Sequence[RowMapping], *, by_run: str
                        ) -> None:
    """Policy ``replace``, once run ``by_run`` is created: end each still-queued run of
    ``active`` (``active_runs`` rows) ``cancelled`` and ask each dispatching or running one
    to stop (``cancel_requested_at``, once, with its run event), in the caller's
    transaction. The new run waits in dispatch until those groups are gone."""
    for old in active:
        if old["status"] == "queued":
            cancel_queued(conn, str(old["id"]), reason="replaced", by_run=by_run)
        else:
            run_named(conn, queries()["request_cancel"],
                      {"run_id": old["id"], "event_id": uuid7(), "by_run": by_run})


def run_now(conn: Connection, task_id: str, *, policy: str | None = None,
            run_id: str | None = None) -> CreatedRun:
    """Run now: a queued ``manual`` run of ``task_id`` under its concurrency policy, in the
    caller's transaction (docs/protocols.md §4.5 "Run now").

    ``policy``: the task's ``concurrency_policy`` as the caller read it without a lock, or
    None (read under the lock). ``run_id``: the new run's id (fresh when None).

    ``allow`` (as read): the run is made by one statement, ``insert_allowed_run``, which
    takes the task row's lock and the next number; the caller must send nothing after it
    but its commit, so the lock is held for that statement and the commit only. When that
    statement finds the task removed or no longer ``allow`` (an edit committed meanwhile),
    the decision is taken again as below. Otherwise the task row is locked once
    (``locked_task``, held until the caller's transaction ends, so two concurrent requests
    see each other's run) and its policy read under the lock: ``forbid`` with a run queued,
    dispatching or running raises RunRefusedError (nothing created); ``allow`` creates;
    ``replace`` creates, then replaces the active runs as the scheduler does
    (``replace_active_runs``). Raises TaskNotFoundError, TaskDeletedError."""
    run_id = run_id or uuid7()
    if policy == "allow":
        row = run_named(conn, queries()["insert_allowed_run"], {
            "task_id": task_id, "run_id": run_id, "event_id": uuid7()}).mappings().first()
        if row is not None:
            return created_run(row)
    policy = str(locked_task(conn, task_id)["concurrency_policy"])
    # ``allow`` decides nothing from the active runs (a manual run has no backlog bound):
    # they are read only for the policies that use them
    active = [] if policy == "allow" else run_named(
        conn, queries()["active_runs"], {"task_id": task_id}).mappings().all()
    if policy == "forbid" and active:
        first = active[0]
        raise RunRefusedError("a run of this task is active; policy forbid",
                              first.get("number"), str(first["status"]))
    run = create_run(conn, task_id=task_id, trigger="manual", run_id=run_id,
                     task_locked=True)
    if run is None:  # a manual run has no slot: only a slot conflict answers None
        raise RunRefusedError("no run was created")
    if policy == "replace":
        replace_active_runs(conn, active, by_run=run.run_id)
    return run
