"""Human-readable output of ``ql3 local``: tables that fit the terminal, times in the
viewer's zone (``display.py``). ``--json`` output does not come through here."""

from __future__ import annotations

from typing import Any

import click

from qinglong.local.app import display
from qinglong.local.app.views import iso
from qinglong.shared import display as shared_display

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})


def _table(columns: list[str], rows: list[list[str]], *, flexible: tuple[str, ...] = (),
           notes: list[str] | None = None, indent: str = "", share: bool = False,
           refs: tuple[str, ...] = (), protect: tuple[str, ...] = (),
           distinct: tuple[str, ...] = ()) -> None:
    """Print a table that fits the terminal (``display.fit_table``: ``share``, ``refs``,
    ``protect`` and ``distinct`` as there), each line after ``indent``; ``notes[i]``, when
    not empty, follows row i on its own indented line, shortened to the width too."""
    width = display.terminal_width() - len(indent)
    lines = display.fit_table(columns, rows, flexible=flexible, width=width, share=share,
                              refs=refs, protect=protect, distinct=distinct)
    click.echo(indent + lines[0])
    for index, line in enumerate(lines[1:]):
        click.echo(indent + line)
        note = (notes or [])[index] if index < len(notes or []) else ""
        if note:
            click.echo(indent + (note if display.DISPLAY.wide else display.shorten(note, width)))


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
    """A table of tasks (shell-quoted commands; schedule and command shortened to fit).

    On a terminal (no ``--wide``) the next fire time and the last run's status are never
    cut: the table drops ENABLED (a disabled task reads ``disabled`` under NEXT) and POLICY,
    and LAST RUN is the status and how long the run took (``succeeded 1m 05s``; ``task show``
    and ``--wide`` add its finish time), so that 80 columns keep
    ``2026-12-02 09:30:00 +08:00`` whole and the schedule and command still get about 25
    columns between them."""
    if display.DISPLAY.wide:
        wide_rows = [
            [
                t["name"],
                _schedule(t),
                _s(t["enabled"]),
                t["concurrency"],
                _next_fire(t),
                shared_display.last_run_wide(t.get("last_run")),
                display.command(t["argv"]),
                labels_text(t),
            ]
            for t in tasks
        ]
        _table(["name", "schedule", "enabled", "policy", "next", "last run", "command",
                "labels"], wide_rows)
        return
    with_labels = any(t.get("labels") for t in tasks)
    columns = ["name", "schedule", "next", "last run", "command",
               *(["labels"] if with_labels else [])]

    def rows(nexts: list[str]) -> list[list[str]]:
        return [
            [
                t["name"],
                _schedule(t),
                nexts[i] if t["enabled"] else "disabled",
                shared_display.last_run_short(t.get("last_run")),
                display.command(t["argv"]),
                *([labels_text(t)] if with_labels else []),
            ]
            for i, t in enumerate(tasks)
        ]

    nexts = [_next_fire(t) for t in tasks]
    timed = [t for t in tasks if not t.get("next_fire_pending") and t.get("next_fire")]
    room = display.terminal_width()
    if with_labels and timed and shared_display.table_width(columns, rows(nexts)) > room:
        # the offset the times share said once, in the header (`NEXT (+08:00)`)
        zone, texts = shared_display.compact_times([t["next_fire"] for t in timed],
                                                   keep_date=True)
        shown = dict(zip([id(t) for t in timed], texts, strict=True))
        nexts = [shown.get(id(t), n) for t, n in zip(tasks, nexts, strict=True)]
        columns[2] = f"next ({zone})"
    # the next fire time and the last run stay whole while the name or schedule can give way
    _table(columns, rows(nexts), flexible=shared_display.TASK_FLEX[with_labels], share=True,
           protect=(columns[2], "last run"), distinct=("name",))


def labels_text(task: dict[str, Any]) -> str:
    """A task's labels for a table or ``task show``: ``平台=京东,daily`` (``-``: none)."""
    return ",".join(str(label) for label in task.get("labels", [])) or "-"


def _schedule(task: dict[str, Any]) -> str:
    """The schedule, with the task's zone when it is not the viewer's (the zone ``task
    add`` would default to here, or UTC after ``--utc``): ``0 8 * * * (Asia/Shanghai)``."""
    from qinglong.shared.zones import machine_zone

    viewer = "UTC" if display.DISPLAY.utc else machine_zone()[0]
    zone = "" if task["timezone"] == viewer else f" ({task['timezone']})"
    return f"{task['schedule']}{zone}"


def _next_fire(task: dict[str, Any]) -> str:
    """The next fire time for a table: local time, ``pending`` or empty."""
    if task.get("next_fire_pending"):
        return "pending"
    return zoned(task.get("next_fire"))


def print_runs(runs: list[dict[str, Any]], indent: str = "") -> None:
    """A table of runs, newest first: ``backup#42``, the id's last 8 hex digits, status,
    exit code (``sig N`` for a signal), start time and duration; a run's recovery or
    leftovers note on the line below it. ``--wide``: full ids and every time."""
    if display.DISPLAY.wide:
        rows = [[ref(r), r["id"], r["status"], _s(r["exit_code"]), _s(r["signal"]),
                 str(len(r["attempts"])), r["trigger"], _t(r["created_at"]), _t(_started(r)),
                 _t(r["finished_at"]), run_duration(r), _note(r) or "-"] for r in runs]
        _table(["run", "id", "status", "exit", "signal", "attempts", "trigger", "created",
                "started", "finished", "duration", "note"], rows, indent=indent)
        return
    rows = [[ref(r), display.short_id(r["id"]), r["status"], _exit(r),
             _t(_started(r) or r["created_at"]), run_duration(r)] for r in runs]
    columns = ["run", "id", "status", "exit", "started", "duration"]
    room = display.terminal_width() - len(indent)
    without_id = [row[:1] + row[2:] for row in rows]
    if shared_display.table_width(columns, rows) > room >= shared_display.table_width(
            columns[:1] + columns[2:], without_id):
        # a run reference is what people copy: rather than cut `backup-database#12`, leave
        # out the short id (a second name for the same run; `--wide` shows the full one);
        # when even that would not fit, the short id stays as the whole handle on the row,
        # and the reference is cut in its task name, keeping `#N` (`jd-daily-si…#4`)
        columns.pop(1)
        rows = without_id
    notes = [f"    note: {_note(r)}" if _note(r) else "" for r in runs]
    _table(columns, rows, flexible=("run",), notes=notes, indent=indent, refs=("run",))


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


def gap_notice(gap: int) -> str:
    """The line a log reader prints where the cap left output out (docs/protocols.md §3.8)."""
    return f"[ql3: {gap} bytes of output left out here by the log cap]"


def follow_end_line(run: dict[str, Any]) -> str:
    """The line ``logs -f`` ends with once the run is terminal (docs/protocols.md §3.8):
    ``run backup#42 failed, exit code 3, took 1m 05s`` (``signal N`` instead of the exit
    code for a run ended by a signal; no code when it has none)."""
    text = f"run {ref(run)} {run['status']}"
    if run.get("signal") is not None:
        text += f", signal {run['signal']}"
    elif run.get("exit_code") is not None:
        text += f", exit code {run['exit_code']}"
    return text + f", took {run_duration(run)}"


def print_inspect_tables(view: dict[str, Any], indent: str = "  ") -> None:
    """``inspect``'s attempts and events as tables within the terminal's width (as
    ``ql3 cluster inspect`` prints them): attempts by number, status, exit, start, duration
    and handle; events by time, kind, status change and detail (the handle and the detail
    give way first, kinds stay whole). When the full times do not fit, the date and offset
    they share are said once, in the titles. ``--wide``: every line whole."""
    attempts, events = view["attempts"], view["events"]

    def attempt_rows(starts: list[str]) -> list[list[str]]:
        return [[str(a["number"]), a["status"], _attempt_exit(a), starts[i],
                 display.span(a["started_at"], a["finished_at"]), _s(a["handle"])]
                for i, a in enumerate(attempts)]

    def event_rows(ats: list[str]) -> list[list[str]]:
        return [[ats[i], e["kind"], _move(e), event_detail(e["detail"]) or "-"]
                for i, e in enumerate(events)]

    a_cols = ["attempt", "status", "exit", "started", "took", "handle"]
    e_cols = ["at", "event", "status", "detail"]
    starts = [_t(a["started_at"]) for a in attempts]
    ats = [_t(e["at"]) for e in events]
    room = display.terminal_width() - len(indent)
    title = ""
    if not display.DISPLAY.wide and max(
            shared_display.table_width(a_cols, attempt_rows(starts)),
            shared_display.table_width(e_cols, event_rows(ats))) > room:
        zone, texts = shared_display.compact_times(
            [a["started_at"] for a in attempts] + [e["at"] for e in events])
        starts, ats = texts[:len(attempts)], texts[len(attempts):]
        title = f" ({zone})"
    if attempts:
        click.echo(f"attempts{title}:")
        _table(a_cols, attempt_rows(starts), flexible=("handle",), indent=indent)
    if events:
        click.echo(f"events{title}:")
        _table(e_cols, event_rows(ats), flexible=("detail",), indent=indent)


def _attempt_exit(attempt: dict[str, Any]) -> str:
    if attempt["signal"] is not None:
        return f"sig {attempt['signal']}"
    return _s(attempt["exit_code"])


def _move(event: dict[str, Any]) -> str:
    if event.get("from") is None and event.get("to") is None:
        return "-"
    return f"{_s(event['from'])} -> {_s(event['to'])}"


def detail_of(event: dict[str, Any]) -> dict[str, Any]:
    """An event view's ``detail`` as a dict: the object of ``--json`` output (or JSON text,
    as older serves answered); ``{}`` when absent or not a JSON object."""
    import json

    detail = event.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            return {}
    return detail if isinstance(detail, dict) else {}


def event_detail(detail: str | dict[str, Any] | None) -> str:
    """An event's detail (an object, or its JSON text) for people: ``key=value`` pairs;
    ``*_ms`` times become ``key=2026-12-01 09:09:01 +08:00`` (Unix ms never shows), JSON
    null pairs are left out, booleans read yes/no, strings unquoted; text that is not a JSON
    object stays as is."""
    import json

    if not detail:
        return ""
    if isinstance(detail, dict):
        data: Any = detail
    else:
        try:
            data = json.loads(detail)
        except ValueError:
            return detail
    if not isinstance(data, dict):
        return detail if isinstance(detail, str) else json.dumps(data, ensure_ascii=False)
    parts = []
    for key, item in data.items():
        if item is None:
            continue
        if key.endswith("_ms") and isinstance(item, int) and not isinstance(item, bool):
            if key.endswith(("_at_ms", "slot_ms", "until_ms", "next_fire_ms", "before_ms",
                             "missed_ms")):
                parts.append(f"{key[:-3]}={_t(iso(item))}")
            else:  # a length of time in ms (step_ms, after_ms, tolerance_ms)
                parts.append(f"{key[:-3]}={item / 1000:g}s")
            continue
        text = item if isinstance(item, str) else (
            _s(item) if isinstance(item, bool | int | float)
            else json.dumps(item, ensure_ascii=False))
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
    kind = event["kind"]
    if kind not in ("slot_skipped", "slot_coalesced", "slots_skipped", "clock_step") \
            or not event["detail"]:
        return None
    detail = detail_of(event)
    if kind == "slots_skipped":  # missed slots (downtime or a forward clock step)
        missed = f"{detail.get('skipped')}{' or more' if detail.get('at_least') else ''}"
        first, last = detail.get("first_missed_ms"), detail.get("last_missed_ms")
        if first is not None:  # the slots missed, then the one that ran instead, if any
            span = f" {_t(iso(first))}" + (
                f" .. {_t(iso(last))}" if last is not None and last != first else "")
            fired = detail.get("fired_slot_ms")
            ran = f"; {_t(iso(fired))} ran instead" if fired is not None else ""
            return f"{missed} missed slot(s){span} skipped: {detail.get('reason')}{ran}"
        until = detail.get("until_ms")  # an event written before the missed slots were named
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


def zoned(value: object, zone: str | None = None) -> str:
    """An ISO UTC time from a view in ``zone`` (an IANA name; None: the viewer's local
    zone) with its offset: ``2026-12-01 09:09:01 +08:00``; ``""`` for None
    (``qinglong.shared.display.zoned``)."""
    return shared_display.zoned(value, zone)


def duration(seconds: float | None) -> str:
    """``display.duration`` (``45s``, ``1m 05s``, ``2h 03m``), with ``""`` for None."""
    return "" if seconds is None else display.duration(seconds)


describe_last_run = shared_display.describe_last_run


def describe_task_event(event: dict[str, Any]) -> str:
    """One line for a task event: its time, then a slot outcome (:func:`describe_slot_event`),
    an edit (``edited: schedule '0 3 * * *' -> '30 2 * * *', env (set A; unset B)``) or the
    event's kind."""
    line = describe_slot_event(event)
    if line is None and event["kind"] == "task_edited" and event.get("detail"):
        detail = detail_of(event)
        parts = []
        for name in detail.get("changed", []):
            change = detail.get(name)
            if isinstance(change, dict):
                parts.append(f"{name} {_edited_value(name, change.get('from'))} -> "
                             f"{_edited_value(name, change.get('to'))}")
            elif name in ("env", "secret_env"):  # names only: values are never in an event
                names = [*(f"set {n}" for n in detail.get(f"{name}_set", [])),
                         *(f"unset {n}" for n in detail.get(f"{name}_unset", []))]
                parts.append(f"{name} ({', '.join(names)})" if names else name)
            else:
                parts.append(name)
        line = "edited: " + "; ".join(parts)
    return f"{zoned(event['at'])}  {line or event['kind'].replace('_', ' ')}"


def _edited_value(name: str, item: object) -> str:
    """An old or new value of a ``task_edited`` event for people: ``-`` for none (no
    timeout, the default cwd), ``timeout_s`` as a duration, text shell-quoted when it has
    spaces (``'0 3 * * *'``); never a Python repr such as ``None`` or ``600.0``."""
    import shlex

    if item is None:
        return "-"
    if name == "timeout_s" and isinstance(item, int | float) and not isinstance(item, bool):
        return display.duration(item)
    return shlex.quote(item) if isinstance(item, str) else _s(item)


def describe_next_slots(view: dict[str, Any]) -> list[str]:
    """Lines for ``task next``: each slot in the task's zone and in the viewer's."""
    lines = [shared_display.fit_title("next slots of ", view["task"],
                                      f" ({view['schedule']}, {view['timezone']})")
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
    for event in reversed(run.get("events") or []):
        if event["kind"].startswith("attempt_") and event.get("detail"):
            detail = detail_of(event)
            if detail.get("launch_message"):
                return f"it did not start: {detail['launch_message']}"
            return None
    return None
