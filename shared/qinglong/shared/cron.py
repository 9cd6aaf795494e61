"""Cron schedules evaluated in a task's time zone (DESIGN.md §3.7).

Pure functions: no I/O, no clock, no database. Instants are integer milliseconds since the
Unix epoch; slots have whole-second resolution.

Schedules: 5-field cron; 6-field cron with seconds first as Qinglong 2.x writes them
(croniter's ``second_at_beginning=True``: ``*/2 * * * * *`` is every two seconds); croniter's
aliases (``@hourly``, ``@daily``...); ``@boot`` (once per ``serve`` start) and ``@once``
(manual only). ``H``/``R`` values are rejected: a slot must be the same instant every time.

Time zones and daylight saving ("gaps and overlaps fire once"):

1. croniter iterates the expression over naive local wall-clock times (no zone, no DST);
2. each wall time becomes an instant with ``zoneinfo`` and ``fold=0``. A time that does not
   exist (spring-forward gap) takes the offset from before the transition, so a daily 02:30
   job in America/New_York fires at 03:30 EDT on that day; an ambiguous time (fall-back
   overlap) maps to its first occurrence, so a daily 01:30 job fires once;
3. emitted instants are strictly increasing: an instant at or before the previously emitted
   one is dropped. An every-minute job therefore fires once per real minute through a gap and
   never twice through an overlap (the repeated wall-clock hour has no slots of its own).

Lookups are O(1)-ish: the fold=0 offset is piecewise constant in wall time, so wall -> instant
increases inside a piece and a lookup costs one croniter call per piece within 30 h. Pieces
are found by offset probes every 6 h and bisection (UTC offsets span -12h..+14h, and tzdata
2026 has no two offset transitions of one zone within 30 h).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from qinglong.shared.errors import ValidationError

ScheduleKind = Literal["cron", "boot", "once"]

SKIP_COUNT_CAP = 1000
"""``Due.skipped`` never exceeds this; counting stops there (``Due.skipped_capped``)."""

_MARGIN_S = 30 * 3600  # wider than any span of UTC offsets (-12h..+14h)
_PROBE_S = 6 * 3600  # one probe interval never holds two transitions (see docstring)
_MAX_DROPS = 100_000  # wall times dropped in a row (an every-second job across a 24h gap)
_MAX_TEXT = 200
_EPOCH = datetime(1970, 1, 1)
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ALIASES = {"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually"}
_HASHED = re.compile(r"(?:^|,)[HR](?:$|[(/,])", re.IGNORECASE)
_SCHEDULE_HINT = "schedule must have 5 fields, or 6 with seconds first"


def _excerpt(value: str) -> str:
    return repr(value if len(value) <= 16 else value[:16] + "...")


def _seconds(offset: timedelta | None) -> int:
    return int(offset.total_seconds()) if offset is not None else 0  # ZoneInfo always answers


@dataclass(frozen=True)
class Due:
    """What ``Schedule.due`` decided (DESIGN.md §3.7). All instants are Unix ms.

    ``fire_slot_ms``: the slot to fire now, or None. ``skipped``: slots after the cursor that
    were missed and will not fire (at most ``SKIP_COUNT_CAP``; ``skipped_capped`` is True when
    counting stopped there, and ``skipped`` is then a lower bound). ``new_cursor_ms``: the
    cursor to store: the latest slot considered, else the old cursor (or now for a new task).
    """

    fire_slot_ms: int | None
    skipped: int
    skipped_capped: bool
    new_cursor_ms: int


@dataclass(frozen=True)
class Schedule:
    """A validated schedule in an IANA time zone; build it with ``parse_schedule``.

    ``kind`` is 'cron', 'boot' (fires once per ``serve`` start) or 'once' (manual only);
    boot and once schedules have no slots. ``has_seconds`` is True for 6-field crons.
    Slot semantics, including daylight saving, are in the module docstring.
    """

    expression: str
    timezone: str
    kind: ScheduleKind
    has_seconds: bool
    zone: ZoneInfo = field(repr=False, compare=False)

    def latest_slot_at_or_before(self, now_ms: int) -> int | None:
        """Newest slot instant (Unix ms) <= ``now_ms``; None for boot/once or no slot."""
        if self.kind != "cron":
            return None
        t = now_ms // 1000
        first = self._first_wall_after(t)
        bound = first if first is not None else self._wall_of(t) + _MARGIN_S
        latest = self._max_instant_before(bound)
        return None if latest is None else latest * 1000

    def next_slot_after(self, t_ms: int) -> int | None:
        """First slot instant (Unix ms) strictly after ``t_ms``; None for boot/once or none."""
        if self.kind != "cron":
            return None
        first = self._first_wall_after(t_ms // 1000)
        return None if first is None else self._instant(first) * 1000

    def due(self, cursor_ms: int | None, now_ms: int, misfire_grace_ms: int) -> Due:
        """Decide what fires at ``now_ms`` given the last handled slot (DESIGN.md §3.7).

        Slots in (cursor, now] are considered. The latest fires if ``now - slot <=
        misfire_grace_ms``; older ones, and the latest too when beyond the grace, are skipped
        and counted. ``cursor_ms`` None means a brand-new task: nothing from the past fires
        and the cursor becomes now. Counting is bounded by ``SKIP_COUNT_CAP``, so a long
        downtime of an every-second job stays fast. All values are Unix ms.

        Raises ValidationError("misfire_grace_ms", ...) for a negative grace.
        """
        if misfire_grace_ms < 0:
            raise ValidationError("misfire_grace_ms", "misfire grace must be >= 0 ms")
        if cursor_ms is None:
            return Due(None, 0, False, now_ms)
        latest = self.latest_slot_at_or_before(now_ms)
        if latest is None or latest <= cursor_ms:
            return Due(None, 0, False, cursor_ms)
        older, capped = self._count_slots(cursor_ms, latest)
        fire = latest if now_ms - latest <= misfire_grace_ms else None
        skipped = older + (1 if fire is None else 0)
        if skipped > SKIP_COUNT_CAP:
            skipped, capped = SKIP_COUNT_CAP, True
        return Due(fire, skipped, capped, latest)

    # Wall times below are naive local seconds since 1970-01-01T00:00 (no zone).

    def _cron(self, wall_s: int) -> croniter:
        return croniter(self.expression, float(wall_s), second_at_beginning=self.has_seconds)

    def _step(self, wall_s: int, forward: bool) -> int | None:
        """The cron wall time strictly after (or before) ``wall_s``; None if there is none."""
        try:
            it = self._cron(wall_s)
            return int(it.get_next(float) if forward else it.get_prev(float))
        except CroniterBadDateError:
            return None

    def _offset(self, wall_s: int) -> int:
        """UTC offset (s) of a wall time read with fold=0 (the pre-transition offset)."""
        return _seconds((_EPOCH + timedelta(seconds=wall_s)).replace(tzinfo=self.zone).utcoffset())

    def _instant(self, wall_s: int) -> int:
        return wall_s - self._offset(wall_s)

    def _wall_of(self, t: int) -> int:
        return t + _seconds(datetime.fromtimestamp(t, tz=self.zone).utcoffset())

    def _boundaries(self, lo: int, hi: int) -> list[int]:
        """Wall times b in (lo, hi] where the fold=0 offset changes: offset(b-1) != offset(b)."""
        found: list[int] = []
        a, off_a = lo, self._offset(lo)
        while a < hi:
            b = min(a + _PROBE_S, hi)
            off_b = self._offset(b)
            if off_b != off_a:
                x, y = a, b
                while y - x > 1:
                    mid = (x + y) // 2
                    x, y = (mid, y) if self._offset(mid) == off_a else (x, mid)
                found.append(y)
            a, off_a = b, off_b
        return found

    def _first_wall_after(self, t: int) -> int | None:
        """First cron wall time, in wall order, whose instant is > t (s); it is always emitted."""
        center = self._wall_of(t)
        starts = [center - _MARGIN_S, *self._boundaries(center - _MARGIN_S, center + _MARGIN_S)]
        for start, end in zip(starts, [*starts[1:], None], strict=True):
            candidate = self._step(max(start - 1, t + self._offset(start)), True)
            if candidate is None or end is None or candidate < end:
                return candidate
        return None  # pragma: no cover - the last piece is open-ended

    def _max_instant_before(self, bound: int) -> int | None:
        """Running maximum (s) of the instants of cron wall times before ``bound``."""
        last = self._step(bound, False)
        if last is None:
            return None
        candidates = [last]
        for b in self._boundaries(last - _MARGIN_S, last):
            prev = self._step(b, False)
            if prev is not None:
                candidates.append(prev)
        return max(self._instant(c) for c in candidates)

    def _count_slots(self, lo_ms: int, hi_ms: int) -> tuple[int, bool]:
        """Slots strictly between lo_ms and hi_ms, counted up to SKIP_COUNT_CAP: (n, capped)."""
        emitted = lo_ms // 1000
        first = self._first_wall_after(emitted)
        if first is None:
            return 0, False
        it = self._cron(first - 1)
        count = 0
        try:
            for _ in range(SKIP_COUNT_CAP + _MAX_DROPS):
                slot = self._instant(int(it.get_next(float)))
                if slot * 1000 >= hi_ms:
                    return count, False
                if slot > emitted:
                    if count == SKIP_COUNT_CAP:
                        return count, True
                    count, emitted = count + 1, slot
        except CroniterBadDateError:
            return count, False
        return count, True


def _load_zone(name: str) -> ZoneInfo:
    if not name or len(name) > 100 or name.startswith("/") or ".." in name or "\\" in name:
        raise ValidationError("timezone", "timezone must be an IANA name such as Asia/Shanghai")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ValidationError("timezone", f"unknown IANA time zone {_excerpt(name)}") from exc


def _check_cron(fields: list[str]) -> None:
    seconds = len(fields) == 6
    names = (("second",) if seconds else ()) + _FIELDS
    for i, (name, value) in enumerate(zip(names, fields, strict=True)):
        if _HASHED.search(value):
            raise ValidationError("schedule", f"{name} field: H and R values are unsupported")
        probe = ["*"] * len(fields)
        probe[i] = value
        if not croniter.is_valid(" ".join(probe), second_at_beginning=seconds):
            raise ValidationError("schedule", f"{name} field {_excerpt(value)} is invalid")
    try:
        croniter(" ".join(fields), 0.0, second_at_beginning=seconds).get_next(float)
    except CroniterBadDateError as exc:
        raise ValidationError("schedule", "schedule never matches a real date") from exc
    except CroniterError as exc:
        raise ValidationError("schedule", "schedule is not a valid cron expression") from exc


def parse_schedule(text: str, timezone: str) -> Schedule:
    """Validate a schedule and its IANA time zone (DESIGN.md §3.7, §2).

    Accepts a 5-field cron, a 6-field cron with seconds first, croniter's ``@hourly``-style
    aliases, ``@boot`` and ``@once``. Raises ``ValidationError("schedule", ...)`` for a wrong
    field count, an out-of-range or malformed field, H/R values, or a cron that never matches;
    ``ValidationError("timezone", ...)`` for an empty, path-like or unknown zone. Messages
    quote at most a short excerpt of the input.
    """
    expression = text.strip()
    if not expression:
        raise ValidationError("schedule", "schedule is empty")
    if len(expression) > _MAX_TEXT:
        raise ValidationError("schedule", f"schedule is longer than {_MAX_TEXT} characters")
    kind: ScheduleKind = "cron"
    if expression.startswith("@"):
        expression = expression.lower()
        if expression in ("@boot", "@once"):
            kind = "boot" if expression == "@boot" else "once"
        elif expression not in _ALIASES:
            raise ValidationError("schedule", f"unknown alias {_excerpt(expression)}")
    else:
        fields = expression.split()
        if len(fields) not in (5, 6):
            raise ValidationError("schedule", f"{_SCHEDULE_HINT} (got {len(fields)})")
        _check_cron(fields)
        expression = " ".join(fields)
    zone = _load_zone(timezone)
    return Schedule(expression, timezone, kind, len(expression.split()) == 6, zone)
