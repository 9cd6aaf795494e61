"""The concurrency policy at a due slot (docs/protocols.md §3.7, issue 10 item 4).

One function decides what a due slot (cron or ``@boot``) does, in the same transaction
that reads the task's runs (:meth:`LocalRunRepository.admit_run`):

- ``forbid``: a run in dispatching/running -> ``skipped_active``; else a queued run that
  has not started -> ``coalesced`` (the slot is served by that run: no new run, no skip);
  else ``run_created``.
- ``allow``: ``run_created`` unless the task already has :data:`BACKLOG_LIMIT` queued runs
  beyond its active ones -> ``backlog_full``.
- ``replace``: cancel the queued runs, ask the active ones to stop (:func:`supersede`),
  then ``run_created``.

A manual ``run`` (:func:`admit_manual`) follows the same rules except that it is never
bounded by the backlog (it is one explicit request, not a slot), and with ``forbid`` it
answers a conflict while a run is active, or the queued run it joins.
"""

from __future__ import annotations

from collections.abc import Callable

from qinglong.local.storage.dispatch_queries import SlotOutcome, SlotReason, SlotState
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import ConcurrencyPolicy, Run, Task, Trigger
from qinglong.shared.errors import ConflictError

BACKLOG_LIMIT = 1
"""Queued (not started) runs a task may hold beyond its active ones (issue 10 item 4)."""


def decide(policy: ConcurrencyPolicy, state: SlotState) -> SlotReason:
    """The outcome of a due slot for a task in ``state`` (pure; see the module doc)."""
    if policy is ConcurrencyPolicy.FORBID:
        if state.active:
            return SlotReason.SKIPPED_ACTIVE
        if state.oldest_queued_id is not None:
            return SlotReason.COALESCED
    elif policy is ConcurrencyPolicy.ALLOW and state.queued >= BACKLOG_LIMIT:
        return SlotReason.BACKLOG_FULL
    return SlotReason.RUN_CREATED


def admit_slot(
    repo: LocalRunRepository,
    task: Task,
    slot_ms: int,
    trigger: Trigger,
    stop_run: Callable[[str], object],
) -> SlotOutcome:
    """Apply the task's policy to its due slot ``slot_ms`` (Unix ms; ``trigger`` schedule
    or boot): queue a run or record why not (event ``slot_skipped``/``slot_coalesced``,
    repeated outcomes merged). ``stop_run(run_id)`` is called for the active runs of a
    ``replace`` task. A slot that already has a run answers ``slot_taken`` before anything
    is stopped: a tick that stopped between the run's commit and the cursor's handles the
    slot again, and must not cancel the run of that very slot. Raises StorageError and
    friends (docs/protocols.md §3.7, issue 10 item 4)."""
    if task.concurrency is ConcurrencyPolicy.REPLACE:
        if repo.slot_has_run(task.id, slot_ms):
            return SlotOutcome(SlotReason.SLOT_TAKEN, None)
        supersede(repo, task.id, stop_run)
    return repo.admit_run(
        task.id, trigger, slot_ms, lambda state: decide(task.concurrency, state),
        task.concurrency.value,
    )


def admit_manual(repo: LocalRunRepository, task: Task, stop_run: Callable[[str], object]) -> Run:
    """A manual run now (``ql3 local run``); returns the run that will serve it: ``allow``
    always queues one (a request, not a slot: no backlog bound); ``replace`` supersedes
    first; ``forbid`` joins the task's queued run that has not started (that run is
    returned, nothing recorded) and raises ConflictError while a run is dispatching or
    running. Raises StorageError and friends (issue 10 item 4)."""
    if task.concurrency is ConcurrencyPolicy.REPLACE:
        supersede(repo, task.id, stop_run)

    def manual(state: SlotState) -> SlotReason:
        if task.concurrency is ConcurrencyPolicy.FORBID:
            return decide(task.concurrency, state)
        return SlotReason.RUN_CREATED

    outcome = repo.admit_run(task.id, Trigger.MANUAL, None, manual, task.concurrency.value)
    if outcome.run is None:
        active = repo.active_runs(task.id)
        if active and active[0].number is not None:
            ref = f"{task.name}#{active[0].number}"
            raise ConflictError(f"run {ref} is {active[0].status.value} and the task's "
                                f"concurrency policy is forbid: wait for it, or cancel it "
                                f"(ql3 local cancel {ref})")
        raise ConflictError("the task already has a run in progress (policy forbid)")
    return outcome.run


def supersede(repo: LocalRunRepository, task_id: str, stop_run: Callable[[str], object]) -> None:
    """Policy ``replace``: cancel the task's queued runs and ask its active ones to stop
    (cancel intent first, then TERM via ``stop_run``); the new run starts once their
    groups are gone (docs/protocols.md §3.7)."""
    for run in repo.queued_runs(task_id):
        repo.request_cancel(run.id, reason="replaced")
    for run in repo.active_runs(task_id):
        repo.request_cancel(run.id, reason="replaced")
        stop_run(run.id)
