"""JSON views of domain records: the shapes ``--json`` prints and the socket carries."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from qinglong.shared.display import iso_utc
from qinglong.shared.statuses import RUN_ACTIVE

if TYPE_CHECKING:  # annotations only: output.py's iso() needs no domain types
    from qinglong.shared.domain import Attempt, Event, Run, Task


def iso(ms: int | None) -> str | None:
    """Unix ms as ISO-8601 UTC with milliseconds (``2026-11-29T20:40:25.123Z``), or None
    (``qinglong.shared.display.iso_utc``)."""
    return iso_utc(ms)


def task_view(task: Task) -> dict[str, Any]:
    """A task as JSON."""
    return {
        "id": task.id,
        "name": task.name,
        "argv": list(task.argv),
        "schedule": task.schedule,
        "timezone": task.timezone,
        "env": dict(task.env),
        "cwd": task.cwd,
        "timeout_s": task.timeout_s,
        "max_attempts": task.max_attempts,
        "concurrency": task.concurrency.value,
        "labels": list(task.labels),
        "enabled": task.enabled,
        "created_at": iso(task.created_at_ms),
        "version": task.version,  # a task_edit's if_version
    }


def attempt_view(attempt: Attempt) -> dict[str, Any]:
    """An attempt as JSON."""
    return {
        "id": attempt.id,
        "number": attempt.number,
        "status": attempt.status.value,
        "exit_code": attempt.exit_code,
        "signal": attempt.signal,
        "handle": attempt.handle,
        "started_at": iso(attempt.started_at_ms),
        "finished_at": iso(attempt.finished_at_ms),
        "deadline_at": iso(attempt.deadline_at_ms),
    }


def leftovers_view(events: list[Event]) -> dict[str, Any] | None:
    """What the run's attempts left behind, from its ``leftovers_*`` events (issue 10 item 5),
    or None when nothing was. ``found``/``killed``: processes found alive after a leader
    exited / of them, how many needed SIGKILL after the grace (summed over attempts);
    ``unresolved``: an attempt lock stayed held by processes that could not be found;
    ``note``: one line for people, e.g. ``leftovers: 1 stopped (1 needed KILL)``."""
    found = killed = 0
    unresolved = False
    seen = False
    for event in events:
        if event.kind not in ("leftovers_stopped", "leftovers_unresolved"):
            continue
        seen = True
        try:
            detail = json.loads(event.detail or "{}")
        except ValueError:
            detail = {}
        found += int(detail.get("found", 0))
        killed += int(detail.get("killed", 0))
        unresolved = unresolved or event.kind == "leftovers_unresolved"
    if not seen:
        return None
    note = f"leftovers: {found} stopped ({killed} needed KILL)"
    if unresolved:
        note = ("leftovers: UNRESOLVED, the attempt lock is still held by processes that "
                f"cannot be found ({found} found and stopped)")
    return {"found": found, "killed": killed, "unresolved": unresolved, "note": note}


def run_view(
    run: Run, *, supervised: bool | None = None, leftovers: list[Event] | None = None
) -> dict[str, Any]:
    """A run as JSON. ``supervised=False`` marks an active run that no live owner watches:
    it carries ``recovery`` explaining why it needs startup recovery (ADR-0067).
    ``leftovers``: the run's events (any kinds); ``leftovers_*`` ones become the
    ``leftovers`` key (see :func:`leftovers_view`; None when nothing was left behind)."""
    view: dict[str, Any] = {
        "id": run.id,
        "number": run.number,
        "task": run.task_name,
        "task_id": run.task_id,
        "status": run.status.value,
        "trigger": run.trigger.value,
        "exit_code": run.exit_code,
        "signal": run.signal,
        "created_at": iso(run.created_at_ms),
        "scheduled_at": iso(run.scheduled_at_ms),
        "finished_at": iso(run.finished_at_ms),
        "cancel_requested": run.cancel_requested,
        "attempts": [attempt_view(a) for a in run.attempts],
        "leftovers": leftovers_view(leftovers or []),
    }
    if supervised is False and run.status in RUN_ACTIVE:
        view["recovery"] = (
            "needs recovery: its owner stopped while the run was "
            f"{run.status.value}; the next `ql3 local serve` settles it from its receipt or "
            "re-attaches it (`ql3 local recovery status --verbose` shows the evidence)"
        )
    return view


def event_detail_object(detail: str | None) -> Any:
    """An event's stored detail (JSON text) as the object it encodes, so ``--json`` output
    carries ``detail`` as an object, never JSON text inside JSON (docs/protocols.md, local
    JSON output; integration/test_first_hour.py::test_json_event_detail_is_an_object).
    None stays None; text that is not JSON stays as it is."""
    if detail is None:
        return None
    try:
        return json.loads(detail)
    except ValueError:
        return detail


def event_view(event: Event) -> dict[str, Any]:
    """An event as JSON: ``detail`` is an object (or None), see
    :func:`event_detail_object`."""
    return {
        "at": iso(event.at_ms),
        "kind": event.kind,
        "run_id": event.run_id,
        "attempt_id": event.attempt_id,
        "from": event.from_status,
        "to": event.to_status,
        "detail": event_detail_object(event.detail),
    }
