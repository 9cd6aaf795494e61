"""What the run page shows about a run besides its log (docs/panel.md "Run detail"): its
reference ``NAME#N`` and, per attempt, the status, exit code or signal, start, end, duration
and reason, from either backend's ``run_get`` answer (local: ``exit_code``/``signal``/
``started_at``/``finished_at`` per attempt; cluster: also ``reason``). Pure functions over
dicts: never an error on a page for a missing or odd field (it shows as empty)."""

from __future__ import annotations

import datetime as dt
import signal as signals
from typing import Any


def _instant(value: object) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        at = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


def duration_text(seconds: float, t: dict[str, str]) -> str:
    """``seconds`` (>= 0) as the catalog's words: under a minute with one decimal
    (``runf.secs``), else whole minutes and seconds (``runf.mins``) or hours and minutes
    (``runf.hours``)."""
    if seconds < 60:
        return t["runf.secs"].format(n=f"{seconds:.1f}")
    whole = int(seconds)
    if whole < 3600:
        return t["runf.mins"].format(m=whole // 60, s=whole % 60)
    return t["runf.hours"].format(h=whole // 3600, m=whole % 3600 // 60)


def signal_text(number: object) -> str:
    """A signal number as ``SIGKILL (9)``; an unknown one as its number."""
    try:
        return f"{signals.Signals(int(number)).name} ({int(number)})"  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return str(number)


def run_reference(run: dict[str, Any]) -> str:
    """``NAME#N`` (what the CLI accepts and prints), or the id's first 13 characters when
    the run has no number or name."""
    name = run.get("task_name") or run.get("task")
    number = run.get("number")
    if name and number is not None:
        return f"{name}#{number}"
    return str(run.get("id", ""))[:13]


def attempt_facts(run: dict[str, Any], t: dict[str, str]) -> list[dict[str, Any]]:
    """The run's attempts oldest first as ``{"number", "status", "exit": str ("" while
    none), "started_at", "finished_at" (ISO or None), "duration": str ("" until both
    ends are known), "reason": str}``. ``exit``: ``exit_code`` when there is one, else the
    signal; ``reason``: the backend's reason (cluster) or "" (the status says it)."""
    rows = []
    for attempt in run.get("attempts") or []:
        exit_code, sig = attempt.get("exit_code"), attempt.get("signal")
        if exit_code is not None:
            shown = str(exit_code)
        elif sig is not None:
            shown = t["runf.signal"].format(sig=signal_text(sig))
        else:
            shown = ""
        start, end = _instant(attempt.get("started_at")), _instant(attempt.get("finished_at"))
        took = duration_text(max(0.0, (end - start).total_seconds()), t) if start and end else ""
        rows.append({"number": attempt.get("number"), "status": attempt.get("status", ""),
                     "exit": shown, "started_at": attempt.get("started_at"),
                     "finished_at": attempt.get("finished_at"), "duration": took,
                     "reason": str(attempt.get("reason") or "")})
    return rows
