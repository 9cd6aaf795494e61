"""Human-readable output of ``ql3 local``: tables that fit the terminal, times in the
viewer's zone (``display.py``). ``--json`` output does not come through here."""

from __future__ import annotations

from typing import Any

import click

from qinglong.local.app import display
from qinglong.local.app.views import iso

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})


def _table(columns: list[str], rows: list[list[str]], *, flexible: tuple[str, ...] = (),
           notes: list[str] | None = None) -> None:
    """Print a table that fits the terminal (``display.fit_table``); ``notes[i]``, when not
    empty, follows row i on its own indented line, shortened to the width too."""
    lines = display.fit_table(columns, rows, flexible=flexible)
    click.echo(lines[0])
    width = display.terminal_width()
    for index, line in enumerate(lines[1:]):
        click.echo(line)
        note = (notes or [])[index] if index < len(notes or []) else ""
        if note:
            click.echo(note if display.DISPLAY.wide else display.shorten(note, width))


when = display.when
command = display.command


def _s(value: object) -> str:
    return display.value(value)


def _t(value: object) -> str:
    """An ISO time from a view, for people (``2026-11-29 21:57:50 +01:00``); ``-`` if None."""
    return display.when(None if value is None else str(value))


def ref(run: dict[str, Any]) -> str:
    """How a run is named to people: ``backup#42`` (the short id if it has no number)."""
    number = run.get("number")
    return f"{run['task']}#{number}" if number is not None else display.short_id(run["id"])


def _started(run: dict[str, Any]) -> str | None:
    """When the run's first attempt started (None: it has not)."""
    attempts = run.get("attempts") or []
    return attempts[0].get("started_at") if attempts else None


def _exit(run: dict[str, Any]) -> str:
    if run.get("signal") is not None:
        return f"sig {run['signal']}"
    return _s(run.get("exit_code"))


def run_duration(run: dict[str, Any]) -> str:
    """From the first attempt's start to the run's end (``1m 05s``); ``-`` until both."""
    return display.span(_started(run), run.get("finished_at"))


def _note(run: dict[str, Any]) -> str:
    return "; ".join(n for n in (run.get("recovery"), (run.get("leftovers") or {}).get("note"))
                     if n)


def print_tasks(tasks: list[dict[str, Any]]) -> None:
    """A table of tasks (shell-quoted commands; schedule and command shortened to fit)."""
    rows = [
        [
            t["name"],
            t["schedule"] + ("" if t["timezone"] == "UTC" else f" ({t['timezone']})"),
            _s(t["enabled"]),
            t["concurrency"],
            display.duration(t["timeout_s"]) if t["timeout_s"] is not None else "-",
            display.command(t["argv"]),
        ]
        for t in tasks
    ]
    _table(["name", "schedule", "enabled", "policy", "timeout", "command"], rows,
           flexible=("command", "schedule", "name"))


def print_runs(runs: list[dict[str, Any]]) -> None:
    """A table of runs, newest first: ``backup#42``, the id's last 8 hex digits, status,
    exit code (``sig N`` for a signal), start time and duration; a run's recovery or
    leftovers note on the line below it. ``--wide``: full ids and every time."""
    if display.DISPLAY.wide:
        rows = [[ref(r), r["id"], r["status"], _s(r["exit_code"]), _s(r["signal"]),
                 str(len(r["attempts"])), r["trigger"], _t(r["created_at"]), _t(_started(r)),
                 _t(r["finished_at"]), run_duration(r), _note(r) or "-"] for r in runs]
        _table(["run", "id", "status", "exit", "signal", "attempts", "trigger", "created",
                "started", "finished", "duration", "note"], rows)
        return
    rows = [[ref(r), display.short_id(r["id"]), r["status"], _exit(r),
             _t(_started(r) or r["created_at"]), run_duration(r)] for r in runs]
    notes = [f"    note: {_note(r)}" if _note(r) else "" for r in runs]
    _table(["run", "id", "status", "exit", "started", "duration"], rows, flexible=("run",),
           notes=notes)


def describe_run(run: dict[str, Any]) -> str:
    """One line: ``run backup#42 (<id>): <status> (exit N[, signal S])``, then the recovery
    note and the leftovers note (issue 10 item 5) when there are."""
    text = f"run {ref(run)} ({run['id']}): {run['status']}"
    if run["exit_code"] is not None:
        text += f" (exit {run['exit_code']}"
        text += f", signal {run['signal']})" if run["signal"] is not None else ")"
    if run.get("recovery"):
        text += f" — {run['recovery']}"
    if run.get("leftovers"):
        text += f" — {run['leftovers']['note']}"
    return text


def describe_attempt(attempt: dict[str, Any]) -> str:
    """One line of ``inspect``: number, status, exit, start, duration and handle."""
    end = f", exit {attempt['exit_code']}" if attempt["exit_code"] is not None else ""
    if attempt["signal"] is not None:
        end += f", signal {attempt['signal']}"
    took = display.span(attempt["started_at"], attempt["finished_at"])
    return (f"attempt {attempt['number']}: {attempt['status']}{end}, started "
            f"{_t(attempt['started_at'])}, took {took}, handle {_s(attempt['handle'])}")


def describe_event(event: dict[str, Any]) -> str:
    """One line of ``inspect``: time, kind, status change and detail."""
    move = (f" {_s(event['from'])} -> {_s(event['to'])}"
            if event.get("from") is not None or event.get("to") is not None else "")
    return f"{_t(event['at'])} {event['kind']}{move} {event_detail(event['detail'])}".rstrip()


def event_detail(detail: str | None) -> str:
    """An event's JSON detail for people: ``key=value`` pairs; ``*_ms`` times become
    ``key=2026-12-01 09:09:01 +08:00`` (Unix ms never shows), JSON null pairs are left out,
    booleans read yes/no, strings unquoted; text that is not a JSON object stays as is."""
    import json

    if not detail:
        return ""
    try:
        data = json.loads(detail)
    except ValueError:
        return detail
    if not isinstance(data, dict):
        return detail
    parts = []
    for key, item in data.items():
        if item is None:
            continue
        if key.endswith("_ms") and isinstance(item, int) and not isinstance(item, bool):
            if key.endswith(("_at_ms", "slot_ms", "until_ms", "next_fire_ms", "before_ms")):
                parts.append(f"{key[:-3]}={_t(iso(item))}")
            else:  # a length of time in ms (step_ms, after_ms, tolerance_ms)
                parts.append(f"{key[:-3]}={item / 1000:g}s")
            continue
        text = item if isinstance(item, str) else (
            _s(item) if isinstance(item, bool | int | float) else json.dumps(item))
        parts.append(f"{key}={text}")
    return " ".join(parts)


def field(key: str, item: object) -> str:
    """One ``task show`` line, ``{key:>13}: value``: times for people (keys ending ``_at``
    or ``next_fire``), ``timeout_s`` as a duration, yes/no, ``-`` for None."""
    if item is not None and (key.endswith("_at") or key == "next_fire"):
        text = _t(item)
    elif key == "timeout_s" and isinstance(item, int | float) and not isinstance(item, bool):
        text = display.duration(item)
    else:
        text = _s(item)
    return f"{key:>13}: {text}"


def describe_slot_event(event: dict[str, Any]) -> str | None:
    """One line for slots that created no run: ``slot_skipped``/``slot_coalesced`` (see
    ``storage/dispatch_queries.py``): ``slots <first> .. <last> (N): <reason>``;
    ``slots_skipped`` (missed: downtime or a forward clock step, issue 10 items 1 and 3);
    a task's ``clock_step`` (its next fire time re-evaluated). None for any other event."""
    import json

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
        text += f" into queued run {display.short_id(str(detail['run_id']))}"
    return text
