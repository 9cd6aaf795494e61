"""Text for people, shared by ``ql3 local`` and ``ql3 cluster`` (issue 12 items 3 and 4):
times, durations, commands and tables that fit. Stdlib only (and ``shared/zones.py`` for a
task's zone): the click options that set :data:`DISPLAY` live with each command line.

- Times: the viewer's local zone with its offset (``2026-12-01 09:09:01 +08:00``), or UTC
  (``+00:00``) after ``--utc``. The zone is the process's (``TZ``, else the system's).
- Durations: ``0s``, ``45s``, ``1m 05s``, ``2h 03m``, ``3d 04h``.
- Commands: shell-quoted (``shlex.join``) so what is shown can be pasted back.
- A task's last run (issue 12 item 2): ``succeeded 1m 05s`` in an 80-column table,
  ``succeeded 2026-12-01 03:00:05 +01:00 (5s)`` with ``--wide``, and
  ``succeeded, finished 2026-12-01 03:00:05 +01:00, took 5s`` in ``task show``.
- Tables: plain columns two spaces apart, one line per row, never wider than the terminal
  (``COLUMNS`` when set, so piped output honours it, else the terminal's size, else 80):
  flexible columns (a command, a note) are shortened first with ``…``, never wrapped; with
  ``--wide`` nothing is shortened. A run reference keeps its ``#N`` when shortened
  (``jd-daily-s…#4``): that is the part people type. Names cut to the same text as another
  name keep the end that tells them apart instead (``京东签到每日…水滴甲`` beside
  ``京东签到每日…水滴乙``: :func:`shorten_apart`), and task lists sort names naturally
  (``task2`` before ``task10``: :func:`natural_key`).
- Widths are screen columns, not characters (:func:`text_width`): East Asian wide and
  full-width characters take 2, so a table of Chinese names stays within 80 columns, and
  shortening never splits a wide character (:func:`cut`).
- Messages (a run's final status, errors) are never fitted: they print whole at any width.

``--json`` never goes through here: it keeps ISO-8601 UTC.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ELLIPSIS = "…"
DEFAULT_WIDTH = 80
MIN_FLEX_WIDTH = 8  # a shortened flexible column keeps at least this many characters
GAP = "  "


# The flexible columns of a `task list` table (both profiles), by whether it has LABELS.
# Without: command, schedule and name share the room. With: labels and command give way
# first, down to 8 columns each; then the widest of the others — so a name, the part people
# type, and a schedule's zone stay whole as long as they can.
TASK_FLEX: dict[bool, tuple[str, ...]] = {
    False: ("command", "schedule", "name"),
    True: ("labels", "command"),
}


@dataclass(slots=True)
class Display:
    """How this process prints: ``utc`` (times in UTC instead of the local zone) and
    ``wide`` (tables show everything, unshortened). Set once by the command's options."""

    utc: bool = False
    wide: bool = False


DISPLAY = Display()


def iso_utc(ms: int | None) -> str | None:
    """Unix ms as ISO-8601 UTC with milliseconds (``2026-11-29T20:40:25.123Z``), or None:
    the form ``--json`` prints."""
    if ms is None:
        return None
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _moment(value: str | int | float | dt.datetime) -> dt.datetime:
    if isinstance(value, dt.datetime):
        stamp = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    elif isinstance(value, str):
        stamp = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        stamp = stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.UTC)
    else:
        stamp = dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
    return stamp.astimezone(dt.UTC) if DISPLAY.utc else stamp.astimezone()


def offset_text(delta: dt.timedelta | None) -> str:
    """A UTC offset as ``+08:00`` / ``-03:30`` (``+00:00`` for None or zero)."""
    minutes = int((delta or dt.timedelta()).total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def when(value: str | int | float | dt.datetime | None) -> str:
    """A time for people: ``2026-12-01 09:09:01 +08:00`` (local zone, or UTC after --utc).

    ``value``: an ISO-8601 string as views carry (``2026-12-01T01:09:01.123Z``), Unix
    *seconds* (int or float), or a datetime (naive means UTC). None gives ``-``.
    Raises ValueError for a string that is not ISO-8601.
    """
    if value is None:
        return "-"
    stamp = _moment(value)
    return stamp.strftime("%Y-%m-%d %H:%M:%S ") + offset_text(stamp.utcoffset())


def duration(seconds: float | None) -> str:
    """A length of time for people: ``0s``, ``45s``, ``1m 05s``, ``2h 03m``, ``3d 04h``
    (truncated to whole seconds; negative counts as 0). None gives ``-``."""
    if seconds is None:
        return "-"
    total = max(0, int(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def span(start_iso: str | None, end_iso: str | None) -> str:
    """The duration between two ISO times of a view (``-`` when either is missing)."""
    if start_iso is None or end_iso is None:
        return "-"
    return duration((_moment(end_iso) - _moment(start_iso)).total_seconds())


def command(argv: Sequence[str]) -> str:
    """A command line as a shell would take it back: ``sh -c 'echo hi'``."""
    return shlex.join(argv)


def value(item: object) -> str:
    """A scalar for text output: ``yes``/``no`` for booleans, ``-`` for None, else str()."""
    if item is None:
        return "-"
    if isinstance(item, bool):
        return "yes" if item else "no"
    return str(item)


def short_id(run_id: str) -> str:
    """The last 8 hex digits of an id (its random end; ``logs``/``inspect`` accept any unique
    suffix of 6 or more)."""
    return run_id[-8:]


def char_width(char: str) -> int:
    """Screen columns one character takes: 2 for East Asian wide and full-width ones
    (``unicodedata.east_asian_width`` W or F: ``京``, ``１``), 0 for combining marks and
    zero-width format characters, else 1."""
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def text_width(text: str) -> int:
    """Screen columns ``text`` takes (:func:`char_width` summed): ``京东签到`` is 8."""
    if text.isascii():
        return len(text)
    return sum(char_width(c) for c in text)


def cut(text: str, width: int) -> str:
    """The longest start of ``text`` that fits ``width`` columns; a wide character that
    would straddle the edge is left out whole (never split)."""
    if text_width(text) <= width:
        return text
    used = 0
    for i, char in enumerate(text):
        used += char_width(char)
        if used > width:
            return text[:i]
    return text


def pad(text: str, width: int) -> str:
    """``text`` followed by spaces up to ``width`` columns (``str.ljust`` by screen width)."""
    return text + " " * max(0, width - text_width(text))


def fit_line(text: str, width: int | None = None) -> str:
    """One line of prose or a summary cut to ``width`` columns (default
    :func:`terminal_width`), ending in ``…`` when cut, unless ``--wide``."""
    if DISPLAY.wide:
        return text
    return shorten(text, terminal_width() if width is None else width)


def field_lines(label: str, text: str, width: int | None = None) -> list[str]:
    """A labelled value (``label`` already padded and ending in ``": "``) as lines within
    ``width`` columns (default :func:`terminal_width`), never shortened, so a path stays
    whole and copyable: ``[label + text]`` when that fits or with ``--wide``; else the label
    alone and the text on the next line, indented two columns when that still fits. A text
    wider than ``width`` by itself stays whole on its own line (the one line allowed past the
    width: integration/test_first_hour.py::test_status_and_settings_fit_80_columns)."""
    whole = label + text
    width = terminal_width() if width is None else width
    if DISPLAY.wide or text_width(whole) <= width:
        return [whole]
    indent = "  " if text_width(text) + 2 <= width else ""
    return [label.rstrip(), indent + text]


def fit_title(before: str, name: str, after: str, width: int | None = None) -> str:
    """``before + name + after`` within ``width`` columns (default :func:`terminal_width`):
    the name gives way (``next slots of 京东签到每日…  (0 8 * * *, Asia/Shanghai)``),
    never below 8 columns; whole with ``--wide``."""
    if DISPLAY.wide:
        return before + name + after
    room = (terminal_width() if width is None else width) - text_width(before + after)
    return before + shorten(name, max(room, MIN_FLEX_WIDTH)) + after


def terminal_width() -> int:
    """``COLUMNS`` when set (piped output too), else the terminal's width, else 80."""
    import shutil  # here: shutil loads bz2 and lzma, which an idle serve never needs

    return max(20, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` screen columns (:func:`text_width`), the last one ``…`` when
    something was cut; a wide character is never split (the line may then end a column
    short)."""
    if text_width(text) <= width:
        return text
    return cut(text, width - 1) + ELLIPSIS if width > 0 else ""


_RUN_REF_END = re.compile(r"(?s)(.+)(#[0-9]+)")


def shorten_ref(text: str, width: int) -> str:
    """A run reference cut to ``width`` keeping its ``#N`` (``jd-daily-s…#4``): the task
    name gives way, from its end; other text (or too small a width) as :func:`shorten`."""
    if text_width(text) <= width:
        return text
    match = _RUN_REF_END.fullmatch(text)
    if match is None or width < len(match.group(2)) + 2:
        return shorten(text, width)
    tail = match.group(2)
    return cut(match.group(1), width - len(tail) - 1) + ELLIPSIS + tail


def shorten_apart(texts: Sequence[str], width: int) -> list[str]:
    """``texts`` (one column's cells) each cut to ``width`` columns as :func:`shorten` does,
    except that different texts cut to the same one are told apart: such a text keeps its
    end after the ``…`` — the shortest end no other of them shares, widened to a third of
    the width when it is shorter (``京东签到每日…水滴甲`` / ``京东签到每日…水滴乙``) — and
    when even that does not fit, the part around where it first differs between two ``…``.
    Source rule: integration/test_task_list_names.py."""
    out = [shorten(text, width) for text in texts]
    groups: dict[str, set[str]] = {}
    for text, shown in zip(texts, out, strict=True):
        if shown != text:
            groups.setdefault(shown, set()).add(text)
    for i, text in enumerate(texts):
        others = [o for o in groups.get(out[i], ()) if o != text]
        if others and width >= 4:
            out[i] = _apart(text, others, width)
    return out


def _apart(text: str, others: Sequence[str], width: int) -> str:
    """``text`` within ``width`` (>= 4) columns, unlike every one of ``others`` (see
    :func:`shorten_apart`)."""
    keep = next((k for k in range(1, len(text) + 1)
                 if all(not o.endswith(text[-k:]) for o in others)), len(text))
    while keep < len(text) and text_width(text[-keep:]) < (width - 1) // 3:
        keep += 1
    tail = text[-keep:]
    if text_width(tail) <= width - 2:
        return cut(text[:-keep], width - 1 - text_width(tail)) + ELLIPSIS + tail
    first = min(next((j for j, (a, b) in enumerate(zip(text, o, strict=False)) if a != b),
                     len(o)) for o in others)  # where it first differs from one of them
    start = first - 1 if text_width(text[first - 1:first + 1]) <= width - 2 else first
    return ELLIPSIS + shorten(text[start:], width - 1)


def natural_key(text: str) -> tuple[Any, ...]:
    """A sort key putting digit runs in numeric order (``task2`` before ``task10``, ``签到９``
    before ``签到10``) and letters case-folded (``Backup`` beside ``backup``); the text
    itself breaks ties (``a01`` and ``a1``)."""
    parts = re.split(r"(\d+)", text)
    return (tuple((1, int(p), "") if i % 2 else (0, 0, p.casefold())
                  for i, p in enumerate(parts)), text)


def table_width(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> int:
    """How wide :func:`fit_table` lays the table out when nothing is shortened."""
    widths = [max([text_width(c), *(text_width(" ".join(str(r[i]).splitlines())) for r in rows)])
              for i, c in enumerate(columns)]
    return sum(widths) + len(GAP) * (len(widths) - 1)


def compact_times(values: Sequence[str | None], *, keep_date: bool = False
                  ) -> tuple[str, list[str]]:
    """ISO times for a narrow table: the part they share said once, for a header or a
    title, and what is left of each. ``(zone, texts)``: times of one offset give
    ``("+08:00", ["2026-12-01 09:09:01", …])``; on one date too (unless ``keep_date``)
    ``("2026-12-01 +08:00", ["09:09:01", …])``. Times of several offsets (a DST change
    among them) are said in UTC (``"UTC"``), so none is ambiguous. None gives ``-``."""
    stamps = [None if v is None else _moment(v) for v in values]
    offsets = {s.utcoffset() for s in stamps if s is not None}
    zone = offset_text(next(iter(offsets), None))
    if len(offsets) > 1:
        stamps = [None if s is None else s.astimezone(dt.UTC) for s in stamps]
        zone = "UTC"
    dates = {s.date() for s in stamps if s is not None}
    if len(dates) == 1 and not keep_date:
        return (f"{dates.pop().isoformat()} {zone}",
                ["-" if s is None else s.strftime("%H:%M:%S") for s in stamps])
    return zone, ["-" if s is None else s.strftime("%Y-%m-%d %H:%M:%S") for s in stamps]


def fit_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int | None = None,
    flexible: Sequence[str] = (),
    wide: bool | None = None,
    share: bool = False,
    refs: Sequence[str] = (),
    protect: Sequence[str] = (),
    distinct: Sequence[str] = (),
) -> list[str]:
    """Lay out a table as lines no longer than ``width`` (default :func:`terminal_width`).

    Columns are separated by two spaces, headers upper-cased, cells on one line each
    (newlines shown as spaces). When the table is too wide, the ``flexible`` columns shrink
    first, in the order given (the first listed gives up its width first), down to 8
    characters (or their header) — with ``share``, together instead: the widest of them
    gives way first (the first listed on a tie), so a short one stays whole and the long
    ones end up with equal shares of the room the others leave — then the other columns
    but the ``protect`` ones, widest first, down to their header's width, then any column
    (``protect``: what must stay whole while anything else can give way, such as a task
    list's next fire time); shortened cells end in
    ``…``, and those of the ``refs`` columns (run references) keep their ``#N``
    (:func:`shorten_ref`), and those of the ``distinct`` columns (task names) stay as
    different as the texts were (:func:`shorten_apart`). Nothing is shortened when
    ``wide`` (default: ``--wide`` was given). The last column is not padded.
    """
    wide = DISPLAY.wide if wide is None else wide
    limit = terminal_width() if width is None else width
    cells = [[" ".join(str(c).splitlines()) for c in row] for row in rows]
    heads = [c.upper() for c in columns]
    widths = [max([text_width(h), *(text_width(r[i]) for r in cells)])
              for i, h in enumerate(heads)]
    if not wide:
        excess = sum(widths) + len(GAP) * (len(widths) - 1) - limit
        flex = [columns.index(c) for c in flexible if c in columns]  # in priority order
        floor = {i: max(MIN_FLEX_WIDTH, len(heads[i])) for i in flex}
        while share and excess > 0:  # the widest flexible column gives way, one at a time
            shrinkable = [i for i in flex if widths[i] > floor[i]]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: (widths[i], -flex.index(i)))
            widths[widest] -= 1
            excess -= 1
        for i in flex:  # first listed shrinks first, down to 8 (or its header)
            cut = min(max(excess, 0), widths[i] - floor[i])
            if cut > 0:
                widths[i] -= cut
                excess -= cut
        kept = {columns.index(c) for c in protect if c in columns}
        rest = [i for i in range(len(columns)) if i not in flex and i not in kept]
        for group in (rest, list(range(len(columns)))):  # then any column, to its header
            while excess > 0:
                shrinkable = [i for i in group if widths[i] > len(heads[i])]
                if not shrinkable:
                    break
                widest = max(shrinkable, key=lambda i: widths[i])
                widths[widest] -= 1
                excess -= 1
    keep_end = {columns.index(c) for c in refs if c in columns}
    for i in {columns.index(c) for c in distinct if c in columns}:
        for row, text in zip(cells, shorten_apart([r[i] for r in cells], widths[i]),
                             strict=True):
            row[i] = text
    lines = []
    for row in [heads, *cells]:
        parts = [pad((shorten_ref if i in keep_end and row is not heads else shorten)(
            cell, widths[i]), widths[i]) for i, cell in enumerate(row)]
        lines.append(GAP.join(parts).rstrip())
    return lines


def zoned(value: object, zone: str | None = None) -> str:
    """An ISO UTC time in ``zone`` (an IANA name; None: the viewer's local zone, or UTC
    after ``--utc``) with its offset: ``2026-12-01 09:09:01 +08:00``; ``""`` for None.
    Raises TimeZoneNotFoundError (``shared/zones.py``) for a zone this machine lacks."""
    from qinglong.shared.zones import load_zone

    if value is None:
        return ""
    if zone is None:  # the viewer's zone, or UTC after --utc
        return when(str(value))
    stamp = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    local = stamp.astimezone(load_zone(zone)) if zone else stamp.astimezone()
    offset = local.strftime("%z")
    return local.strftime("%Y-%m-%d %H:%M:%S ") + f"{offset[:3]}:{offset[3:]}"


def last_run_short(last: Mapping[str, Any] | None) -> str:
    """A task's last run for an 80-column table: its status and how long it took
    (``succeeded 1m 05s``; the status alone before it started); ``""``: it never ran.
    ``last``: ``{"status", "duration_s"}`` (seconds or None), more keys ignored."""
    if not last:
        return ""
    took = last.get("duration_s")
    status = str(last["status"])
    return f"{status} {duration(took)}" if took is not None else status


def last_run_wide(last: Mapping[str, Any] | None) -> str:
    """A task's last run for a ``--wide`` table: status, finish time with its offset and
    duration (``succeeded 2026-12-01 03:00:05 +01:00 (5s)``); ``""``: it never ran.
    ``last``: ``{"status", "finished_at"`` (ISO or None), ``"duration_s"}``."""
    if not last:
        return ""
    text = f"{last['status']} {zoned(last.get('finished_at'))}".rstrip()
    took = last.get("duration_s")
    return text + (f" ({duration(took)})" if took is not None else "")


def describe_last_run(last: Mapping[str, Any] | None) -> str:
    """A task's last run for ``task show``: ``succeeded, finished 2026-12-01 03:00:05
    +01:00, took 5s`` (``started <time>`` while it runs, when the view gives
    ``started_at``), or ``never ran``."""
    if not last:
        return "never ran"
    text = str(last["status"])
    if last.get("finished_at"):
        text += f", finished {zoned(last['finished_at'])}"
    elif last.get("started_at"):
        text += f", started {zoned(last['started_at'])}"
    took = last.get("duration_s")
    if took is not None:
        text += f", took {duration(took)}"
    return text
