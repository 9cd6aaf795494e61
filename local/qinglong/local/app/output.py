"""Human-readable output of ``ql3 local`` (rich tables, imported only when printing)."""

from __future__ import annotations

from typing import Any

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})


def _table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console = Console()
    if not console.is_terminal:
        console = Console(width=240)  # piped output: never fold ids
    console.print(table)


def _s(value: object) -> str:
    return "" if value is None else str(value)


def _t(value: object) -> str:
    """An ISO time from a view, shortened for tables (``2026-11-29 20:57:50``)."""
    return "" if value is None else str(value)[:19].replace("T", " ")


def print_tasks(tasks: list[dict[str, Any]]) -> None:
    """A table of tasks."""
    rows = [
        [
            t["name"],
            t["schedule"] + ("" if t["timezone"] == "UTC" else f" ({t['timezone']})"),
            "yes" if t["enabled"] else "no",
            t["concurrency"],
            _next_fire(t),
            _last(t.get("last_run")),
            " ".join(t["argv"]),
        ]
        for t in tasks
    ]
    _table("tasks", ["name", "schedule", "enabled", "policy", "next", "last run", "command"],
           rows)


def _next_fire(task: dict[str, Any]) -> str:
    """The next fire time for a table: local time, ``pending`` or empty."""
    if task.get("next_fire_pending"):
        return "pending"
    return zoned(task.get("next_fire"))


def _last(last: dict[str, Any] | None) -> str:
    """``succeeded 2026-12-01 03:00:05 +01:00 (5.0s)`` for a table; empty: never ran."""
    if not last:
        return ""
    text = f"{last['status']} {zoned(last.get('finished_at'))}".rstrip()
    return text + (f" ({duration(last['duration_s'])})" if last.get("duration_s") is not None
                   else "")


def print_runs(runs: list[dict[str, Any]]) -> None:
    """A table of runs, with the reason of any that needs recovery."""
    rows = [
        [
            r["id"],
            r["task"],
            r["status"],
            _s(r["exit_code"]),
            _s(r["signal"]),
            str(len(r["attempts"])),
            _t(r["created_at"]),
            _t(r["finished_at"]),
            "; ".join(n for n in (r.get("recovery"), (r.get("leftovers") or {}).get("note"))
                      if n),
        ]
        for r in runs
    ]
    _table(
        "runs",
        ["id", "task", "status", "exit", "signal", "attempts", "created", "finished", "note"],
        rows,
    )


def describe_run(run: dict[str, Any]) -> str:
    """One line: ``run <id> of <task>: <status> (exit N[, signal S])``, then the recovery
    note and the leftovers note (issue 10 item 5) when there are."""
    text = f"run {run['id']} of {run['task']}: {run['status']}"
    if run["exit_code"] is not None:
        text += f" (exit {run['exit_code']}"
        text += f", signal {run['signal']})" if run["signal"] is not None else ")"
    if run.get("recovery"):
        text += f" — {run['recovery']}"
    if run.get("leftovers"):
        text += f" — {run['leftovers']['note']}"
    return text


def describe_slot_event(event: dict[str, Any]) -> str | None:
    """One line for slots that created no run: ``slot_skipped``/``slot_coalesced`` (see
    ``storage/dispatch_queries.py``): ``slots <first> .. <last> (N): <reason>``;
    ``slots_skipped`` (missed: downtime or a forward clock step, issue 10 items 1 and 3);
    a task's ``clock_step`` (its next fire time re-evaluated). None for any other event."""
    import json

    from qinglong.local.app.views import iso

    kind = event["kind"]
    if kind not in ("slot_skipped", "slot_coalesced", "slots_skipped", "clock_step") \
            or not event["detail"]:
        return None
    detail = json.loads(event["detail"])
    if kind == "slots_skipped":  # missed slots (downtime or a forward clock step)
        missed = f"{detail.get('skipped')}{' or more' if detail.get('at_least') else ''}"
        until = detail.get("until_ms")
        span = f" up to {_t(iso(until))}" if until is not None else ""
        return f"{missed} missed slot(s){span} skipped: {detail.get('reason')}"
    if kind == "clock_step":  # this task's next fire time moved after a backward step
        nxt = detail.get("next_fire_ms")
        return (f"clock stepped {detail.get('direction')}: next fire time re-evaluated"
                + (f" to {_t(iso(nxt))}" if nxt is not None else ""))
    first = _t(iso(detail.get("slot_ms")))
    count = int(detail.get("count", 1))
    span = first if count == 1 else f"{first} .. {_t(iso(detail.get('last_slot_ms')))}"
    text = f"slot{'s' if count > 1 else ''} {span} ({count}): {detail.get('reason')}"
    if detail.get("run_id"):
        text += f" into queued run {detail['run_id']}"
    return text


def zoned(value: object, zone: str | None = None) -> str:
    """An ISO UTC time from a view in ``zone`` (an IANA name; None: the viewer's local
    zone) with its offset: ``2026-12-01 09:09:01 +08:00``; ``""`` for None."""
    import datetime as dt
    from zoneinfo import ZoneInfo

    if value is None:
        return ""
    stamp = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    local = stamp.astimezone(ZoneInfo(zone)) if zone else stamp.astimezone()
    offset = local.strftime("%z")
    return local.strftime("%Y-%m-%d %H:%M:%S ") + f"{offset[:3]}:{offset[3:]}"


def duration(seconds: float | None) -> str:
    """``1m 05s``, ``2h 03m``, ``0.4s``; ``""`` for None."""
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m {whole % 60:02d}s" if whole >= 60 else f"{whole}s"
    return f"{whole // 3600}h {whole % 3600 // 60:02d}m"


def describe_last_run(last: dict[str, Any] | None) -> str:
    """``succeeded, finished 2026-12-01 03:00:05 +01:00, took 5.0s`` or ``never ran``."""
    if not last:
        return "never ran"
    text = str(last["status"])
    if last.get("finished_at"):
        text += f", finished {zoned(last['finished_at'])}"
    elif last.get("started_at"):
        text += f", started {zoned(last['started_at'])}"
    if last.get("duration_s") is not None:
        text += f", took {duration(last['duration_s'])}"
    return text


def describe_run_times(run: dict[str, Any]) -> str:
    """:func:`describe_run` plus when the run was created and finished (issue 12 item 2)."""
    text = describe_run(run) + f" — created {zoned(run['created_at'])}"
    if run.get("finished_at"):
        text += f", finished {zoned(run['finished_at'])}"
    return text


def describe_task_event(event: dict[str, Any]) -> str:
    """One line for a task event: its time, then a slot outcome (:func:`describe_slot_event`),
    an edit (``edited: schedule '0 3 * * *' -> '30 2 * * *', env (set A; unset B)``) or the
    event's kind."""
    import json

    line = describe_slot_event(event)
    if line is None and event["kind"] == "task_edited" and event.get("detail"):
        detail = json.loads(event["detail"])
        parts = []
        for name in detail.get("changed", []):
            change = detail.get(name)
            if isinstance(change, dict):
                parts.append(f"{name} {change.get('from')!s} -> {change.get('to')!s}")
            elif name == "env":
                names = [*(f"set {n}" for n in detail.get("env_set", [])),
                         *(f"unset {n}" for n in detail.get("env_unset", []))]
                parts.append(f"env ({', '.join(names)})" if names else "env")
            else:
                parts.append(name)
        line = "edited: " + "; ".join(parts)
    return f"{zoned(event['at'])}  {line or event['kind'].replace('_', ' ')}"


def describe_next_slots(view: dict[str, Any]) -> list[str]:
    """Lines for ``task next``: each slot in the task's zone and in the viewer's."""
    lines = [f"next slots of {view['task']} ({view['schedule']}, {view['timezone']})"
             + ("" if view["enabled"] else " — the task is disabled: none of them fires")]
    if not view["slots"]:
        lines.append("  none: @boot fires once per serve start, @once only when run by hand")
    for slot in view["slots"]:
        lines.append(f"  {zoned(slot, view['timezone'])}  (here: {zoned(slot)})")
    return lines


def launch_failure(run: dict[str, Any]) -> str | None:
    """``it did not start: <reason>`` when the run's newest attempt failed before its
    command started (a deleted working directory, say: issue 12 item 10), from the events
    of a ``run_get`` view; None otherwise."""
    import json

    for event in reversed(run.get("events") or []):
        if event["kind"].startswith("attempt_") and event.get("detail"):
            detail = json.loads(event["detail"])
            if detail.get("launch_message"):
                return f"it did not start: {detail['launch_message']}"
            return None
    return None
