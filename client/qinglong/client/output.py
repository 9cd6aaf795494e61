"""What ``ql3 cluster`` prints for people, in ``ql3 local``'s conventions
(``qinglong.shared.display``): tables that fit ``COLUMNS``/80 (``--wide``: everything), times
in the viewer's zone with its offset (``--utc``: UTC), durations as ``1m 05s``, runs named
``TASK#N``. The shapes printed are the control API's answers (``control/api/*_models.py``);
``--json`` does not come through here."""

from __future__ import annotations

import json
from typing import Any

import click

from qinglong.shared import display

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})


def table(columns: list[str], rows: list[list[str]], *, flexible: tuple[str, ...] = (),
          indent: str = "", share: bool = False, refs: tuple[str, ...] = (),
          protect: tuple[str, ...] = (), distinct: tuple[str, ...] = ()) -> None:
    """Print rows as a table that fits the terminal (``display.fit_table``: ``share``,
    ``refs``, ``protect`` and ``distinct`` as there), each line after ``indent``."""
    width = display.terminal_width() - len(indent)
    for line in display.fit_table(columns, rows, flexible=flexible, width=width, share=share,
                                  refs=refs, protect=protect, distinct=distinct):
        click.echo(indent + line)


def line(text: str) -> str:
    """A ``key: value`` line of ``task show``/``script push`` shortened to the terminal's
    width with ``…`` (whole with ``--wide``). Messages — status lines, errors — never go
    through here: they print whole whatever the width."""
    return text if display.DISPLAY.wide else display.shorten(text, display.terminal_width())


def t(value: object) -> str:
    """An ISO time of an answer for people (``2026-11-29 21:57:50 +01:00``); ``-`` if None."""
    return display.when(None if value is None else str(value))


def ref(run: dict[str, Any]) -> str:
    """How a run is named to people: ``backup#42`` (the short id if it has no number)."""
    number = run.get("number")
    return (f"{run['task_name']}#{number}" if number is not None
            else display.short_id(run["id"]))


def task_command(task: dict[str, Any]) -> str:
    """A task's command as typed: argv shell-quoted, or its shell line as given; a bundle
    task without either runs its entry point (``bundle 5d9c0a1e: run.sh``)."""
    if task.get("argv"):
        return display.command(task["argv"])
    if task.get("shell"):
        return str(task["shell"])
    if task.get("bundle_digest"):
        return f"bundle {task['bundle_digest'][:8]}: {task.get('entry_point') or '-'}"
    return "-"


def schedule(task: dict[str, Any]) -> str:
    """``0 3 * * * (Asia/Shanghai)``; the zone only when it is not the viewer's (this
    machine's zone, ``shared/zones.py``; UTC after ``--utc``); ``-`` for manual only."""
    from qinglong.shared.zones import machine_zone

    viewer = "UTC" if display.DISPLAY.utc else machine_zone()[0]
    zone = "" if task["timezone"] == viewer else f" ({task['timezone']})"
    return f"{task.get('schedule') or '-'}{zone}"


def labels(values: dict[str, str]) -> str:
    """``k=v,k2=v2`` (sorted), or ``-``."""
    return ",".join(f"{k}={v}" for k, v in sorted(values.items())) or "-"


TASK_FLEX = display.TASK_FLEX


def print_tasks(tasks: list[dict[str, Any]]) -> None:
    """Tasks by name, as ``ql3 local task list`` prints them: schedule, next fire time
    (``disabled``), last run as status and duration (``succeeded 1m 05s``), command; the
    command, then the schedule, then the name are shortened to fit, never the next fire time
    or the last run; a LABELS column when any task has labels. ``--wide`` adds the enabled
    flag, policy, attempts and the last run's finish time."""
    if display.DISPLAY.wide:
        table(["name", "schedule", "enabled", "policy", "attempts", "next", "last run",
               "labels", "command"],
              [[x["name"], schedule(x), display.value(x["enabled"]), x["concurrency_policy"],
                str(x["max_attempts"]), t(x["next_fire_at"]),
                display.last_run_wide(x.get("last_run")), labels(x["labels"]),
                task_command(x)] for x in tasks])
        return
    with_labels = any(x["labels"] for x in tasks)
    columns = ["name", "schedule", "next", "last run", "command",
               *(["labels"] if with_labels else [])]

    def rows(nexts: list[str]) -> list[list[str]]:
        return [[x["name"], schedule(x), nexts[i] if x["enabled"] else "disabled",
                 display.last_run_short(x.get("last_run")), task_command(x),
                 *([labels(x["labels"])] if with_labels else [])]
                for i, x in enumerate(tasks)]

    nexts = [t(x["next_fire_at"]) for x in tasks]
    if with_labels and display.table_width(columns, rows(nexts)) > display.terminal_width():
        # the offset the times share said once, in the header (`NEXT (+08:00)`)
        zone, nexts = display.compact_times([x["next_fire_at"] for x in tasks],
                                            keep_date=True)
        columns[2] = f"next ({zone})"
    # the next fire time and the last run stay whole while the name or schedule can give way
    table(columns, rows(nexts), flexible=TASK_FLEX[with_labels], share=True,
          protect=(columns[2], "last run"), distinct=("name",))


def exit_text(run: dict[str, Any]) -> str:
    return display.value(run.get("exit_code"))


def run_duration(run: dict[str, Any]) -> str:
    """From the run's start to its end (``1m 05s``); ``-`` until both."""
    return display.span(run.get("started_at"), run.get("finished_at"))


def print_runs(runs: list[dict[str, Any]], indent: str = "") -> None:
    """Runs newest first: ``backup#42``, the id's last 8 hex digits, status, exit code,
    start (or creation) time, duration; a reference too long is cut in its task name,
    keeping ``#N`` (``jd-daily-si…#4``). ``--wide``: full ids and every time."""
    if display.DISPLAY.wide:
        table(["run", "id", "status", "exit", "attempts", "trigger", "created", "started",
               "finished", "duration"],
              [[ref(r), r["id"], r["status"], exit_text(r), str(r["attempt_count"]),
                r["trigger"], t(r["created_at"]), t(r["started_at"]), t(r["finished_at"]),
                run_duration(r)] for r in runs], indent=indent)
        return
    table(["run", "id", "status", "exit", "started", "duration"],
          [[ref(r), display.short_id(r["id"]), r["status"], exit_text(r),
            t(r["started_at"] or r["created_at"]), run_duration(r)] for r in runs],
          flexible=("run",), indent=indent, refs=("run",))


def describe_run(run: dict[str, Any]) -> str:
    """``run backup#42 (<id>): <status> (exit N)``, whole at any width: a message, not a
    table row (``inspect`` shows when a cancel was requested, among the events)."""
    text = f"run {ref(run)} ({run['id']}): {run['status']}"
    if run.get("exit_code") is not None:
        text += f" (exit {run['exit_code']})"
    return text


def _worker(attempt: dict[str, Any]) -> str:
    """The worker by its name (``w1``); the incarnation's short id when the answer has no
    name."""
    ident = attempt.get("worker_incarnation_id")
    if attempt.get("worker_name"):
        return str(attempt["worker_name"])
    return display.short_id(ident) if ident else "-"


def _ended(attempt: dict[str, Any]) -> str:
    if attempt.get("signal") is not None:
        return f"sig {attempt['signal']}"
    return display.value(attempt.get("exit_code"))


def attempt_rows(attempts: list[dict[str, Any]], started: list[str] | None = None
                 ) -> tuple[list[str], list[list[str]]]:
    """The attempts table's columns and rows; ``started``: the start times as shown
    (``display.compact_times``), else each in full."""
    starts = started or [t(a.get("started_at")) for a in attempts]
    return (["attempt", "status", "exit", "started", "took", "worker", "reason"],
            [[str(a["number"]), a["status"], _ended(a), starts[i],
              display.span(a.get("started_at"), a.get("finished_at")), _worker(a),
              a.get("reason") or "-"] for i, a in enumerate(attempts)])


def print_attempts(attempts: list[dict[str, Any]], indent: str = "  ",
                   started: list[str] | None = None) -> None:
    """``inspect``'s attempts as a table: number, status, exit (``sig N``), start, duration,
    the worker by its name and the reason it ended so — never shortened (the worker's name,
    then the start, give way first). ``--wide`` adds the incarnation's full id."""
    columns, rows = attempt_rows(attempts, started)
    if display.DISPLAY.wide:
        columns.insert(6, "incarnation")
        for row, attempt in zip(rows, attempts, strict=True):
            row.insert(6, attempt.get("worker_incarnation_id") or "-")
    table(columns, rows, flexible=("worker", "started"), indent=indent)


def detail_text(detail: dict[str, Any] | None) -> str:
    """An event's detail as ``key=value`` pairs (null pairs left out, booleans yes/no,
    nested values as JSON)."""
    parts = []
    for key, item in (detail or {}).items():
        if item is None:
            continue
        text = item if isinstance(item, str) else (
            display.value(item) if isinstance(item, bool | int | float)
            else json.dumps(item, ensure_ascii=False))
        parts.append(f"{key}={text}")
    return " ".join(parts)


def event_rows(events: list[dict[str, Any]], at: list[str] | None = None
               ) -> tuple[list[str], list[list[str]]]:
    """The events table's columns and rows: time (``at``: as shown, else in full), kind,
    status change, detail."""
    times = at or [t(e["at"]) for e in events]
    return (["at", "event", "status", "detail"],
            [[times[i], e["kind"], f"{display.value(e.get('from_status'))} -> "
              f"{e['to_status']}", detail_text(e.get("detail")) or "-"]
             for i, e in enumerate(events)])


def print_events(events: list[dict[str, Any]], indent: str = "  ",
                 at: list[str] | None = None) -> None:
    """``inspect``'s event history, oldest first: time, kind (never shortened), status
    change, detail (which gives way first)."""
    columns, rows = event_rows(events, at)
    table(columns, rows, flexible=("detail", "status"), indent=indent)


def print_inspect(view: dict[str, Any], indent: str = "  ") -> None:
    """``inspect``: the run's line, its attempts and its events. When either table would not
    fit in full, their times lose what they share — said once in the titles
    (``attempts (2026-12-02 +08:00):``, times ``09:30:00``) — so that event names and
    reasons stay whole at 80 columns."""
    click.echo(describe_run(view))
    attempts, events = view["attempts"], view["events"]
    room = display.terminal_width() - len(indent)
    started = at = None
    note = ""
    if not display.DISPLAY.wide and max(display.table_width(*attempt_rows(attempts)),
                                         display.table_width(*event_rows(events))) > room:
        zone, texts = display.compact_times([a.get("started_at") for a in attempts]
                                            + [e["at"] for e in events])
        started, at = texts[:len(attempts)], texts[len(attempts):]
        note = f" ({zone})"
    if attempts:
        click.echo(f"attempts{note}:")
        print_attempts(attempts, indent, started)
    if events:
        click.echo(f"events{note}:")
        print_events(events, indent, at)


def describe_task_event(event: dict[str, Any]) -> str:
    """One line of ``task show``: time, kind, the fields an edit changed (never values) and
    who did it."""
    detail = dict(event.get("detail") or {})
    fields = detail.pop("fields", None)
    by = detail.pop("by", None)
    text = f"{t(event['at'])}  {event['kind'].replace('_', ' ')}"
    if fields:
        text += ": " + ", ".join(fields)
    if by:
        text += f" (by {by})"
    return text


KEY_WIDTH = 13  # ``bundle_digest``: the longest key ``task show`` and ``script push`` print


def field(key: str, item: object, width: int = KEY_WIDTH) -> str:
    """One ``task show`` line, ``{key:>width}: value``: times for people (keys ending
    ``_at``), ``timeout_s`` as a duration, yes/no, ``-`` for None; cut to the terminal's width
    with ``…`` (whole with ``--wide``)."""
    if isinstance(item, Shown):
        text = str(item)
    elif item is not None and key.endswith("_at"):
        text = t(item)
    elif key == "timeout_s" and isinstance(item, int) and not isinstance(item, bool):
        text = display.duration(item)
    else:
        text = display.value(item)
    return line(f"{key:>{width}}: {text}")


class Shown(str):
    """A :func:`field` value already worded for people (``disabled``), shown as it is."""

    __slots__ = ()


def print_fields(pairs: list[tuple[str, object]]) -> None:
    """``task show``'s ``key: value`` lines, the keys right-aligned on the longest."""
    width = max([KEY_WIDTH, *(len(key) for key, _ in pairs)])
    for key, item in pairs:
        click.echo(field(key, item, width))


def next_slots_lines(view: dict[str, Any]) -> list[str]:
    """Lines for ``task next``: each slot in the task's zone and in the viewer's."""
    head = display.fit_title("next slots of ", view["task"],
                             f" ({view['schedule'] or 'no schedule'}, {view['timezone']})")
    lines = [head + ("" if view["enabled"] else " — the task is disabled: none of them fires")]
    if not view["slots"]:
        lines.append("  none: the task runs only when asked (`ql3 cluster run`)")
    for slot in view["slots"]:
        lines.append(f"  {display.zoned(slot, view['timezone'])}  "
                     f"(here: {display.zoned(slot)})")
    return lines


def print_occurrences(items: list[dict[str, Any]]) -> None:
    """The occurrence ledger, newest first: outcome, first and last slot, count, run. The
    outcome (``skipped_downtime``) is what the command is for: never shortened. When the
    table does not fit, the slots' shared offset moves into the headers
    (``FIRST SLOT (+08:00)``, cells ``2026-12-02 09:30:00``; ``UTC`` if they have several)."""
    def rows(first: list[str], last: list[str]) -> list[list[str]]:
        return [[o["outcome"], first[i], last[i] if o["slot_count"] > 1 else "",
                 str(o["slot_count"]), display.short_id(o["run_id"]) if o.get("run_id") else ""]
                for i, o in enumerate(items)]

    columns = ["outcome", "first slot", "last slot", "slots", "run"]
    cells = rows([t(o["first_slot"]) for o in items], [t(o["last_slot"]) for o in items])
    if not display.DISPLAY.wide and display.table_width(columns, cells) > \
            display.terminal_width():
        slots = [o["first_slot"] for o in items] + [o["last_slot"] for o in items]
        zone, texts = display.compact_times(slots, keep_date=True)
        columns[1:3] = [f"first slot ({zone})", f"last slot ({zone})"]
        cells = rows(texts[:len(items)], texts[len(items):])
    table(columns, cells, flexible=("run", columns[2], columns[1]))


def print_workers(workers: list[dict[str, Any]]) -> None:
    """Worker incarnations newest first: name, short id, state, last seen, attempts held,
    labels; ``--wide`` adds the pool, concurrency, start and stop times and full ids."""
    if display.DISPLAY.wide:
        table(["name", "incarnation", "pool", "state", "last seen", "held", "concurrency",
               "started", "stopped", "labels"],
              [[w["name"], w["id"], w["pool"], w["state"], t(w["last_seen_at"]),
                str(w["attempts_held"]), str(w["concurrency"]), t(w["started_at"]),
                t(w["stopped_at"]), labels(w["labels"])] for w in workers])
        return
    table(["name", "id", "state", "last seen", "held", "labels"],
          [[w["name"], display.short_id(w["id"]), w["state"], t(w["last_seen_at"]),
            str(w["attempts_held"]), labels(w["labels"])] for w in workers],
          flexible=("labels", "name"))


def size(count: int | None) -> str:
    """A byte count for people: ``412 B``, ``1.5 KiB``, ``3.2 MiB`` (``-`` for None)."""
    if count is None:
        return "-"
    amount = float(count)
    for unit in ("B", "KiB", "MiB"):
        if amount < 1024 or unit == "MiB":
            return f"{count} B" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    raise AssertionError("unreachable")


def digest(value: str) -> str:
    """A bundle digest as listed: its first 12 hex digits (a unique prefix of 8 or more
    names it to ``script show``/``rm`` and ``--bundle``); whole with ``--wide``."""
    return value if display.DISPLAY.wide else value[:12]


def print_scripts(scripts: list[dict[str, Any]]) -> None:
    """Bundles by digest: digest, members, compressed and unpacked size, how many live
    tasks name it, when it was pushed."""
    table(["digest", "members", "size", "unpacked", "tasks", "pushed"],
          [[digest(s["digest"]), str(s["member_count"]), size(s["size_bytes"]),
            size(s["unpacked_bytes"]), str(s["used_by"]), t(s["created_at"])]
           for s in scripts], flexible=("pushed",))


def print_members(members: list[dict[str, Any]], indent: str = "  ") -> None:
    """``script show``'s members in archive order: mode (octal), size, path (``dir/``)."""
    table(["mode", "size", "path"],
          [[f"{m['mode']:04o}", size(m["size_bytes"]) if m["kind"] == "file" else "-",
            m["path"] + ("/" if m["kind"] == "dir" else "")] for m in members],
          flexible=("path",), indent=indent)
