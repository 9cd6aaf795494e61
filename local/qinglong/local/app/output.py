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
            _s(t["timeout_s"]),
            " ".join(t["argv"]),
        ]
        for t in tasks
    ]
    _table("tasks", ["name", "schedule", "enabled", "policy", "timeout s", "command"], rows)


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
