"""Cron schedules evaluated in a task's time zone (docs/protocols.md §3.7).

Pure functions: no I/O, no clock, no database. Instants are integer milliseconds since the
Unix epoch; slots have whole-second resolution.

Schedules: 5-field cron; 6-field cron with seconds first as Qinglong 2.x writes them
(croniter's ``second_at_beginning=True``: ``*/2 * * * * *`` is every two seconds); croniter's
aliases (``@hourly``, ``@daily``...); ``@boot`` (once per ``serve`` start) and ``@once``
(manual only). ``H``/``R`` values are rejected: a slot must be the same instant every time.

Daylight saving follows cron(8) of cronie and vixie (docs/protocols.md §3.7, issue 10 item 2). A
schedule is a *wildcard* job when its minute or its hour field begins with ``*`` (``*``,
``*/5``: cronie's MIN_STAR/HR_STAR; a 6-field cron's seconds field does not count; ``@hourly``
is ``0 * * * *``, a wildcard job; the other aliases are fixed jobs), else a *fixed* job.

- Wildcard job: its slots are the real instants whose local wall time matches the expression,
  and nothing else. Through an overlap (clocks go back) both passes of the repeated wall
  times match, so ``* * * * * *`` fires every real second, ``*/5 * * * *`` every real five
  minutes, and ``30 * * * *`` at 01:30 EDT, 01:30 EST and 02:30 EST in America/New_York
  (2024-11-03). Wall times inside a gap (clocks go forward) never occur and have no slot:
  ``30 * * * *`` fires at 01:30 EST, then 03:30 EDT (2024-03-10).
- Fixed job: a matching wall time in an overlap fires once, at its first pass (fold=0); a
  matching wall time inside a gap fires right after the gap, at the transition instant, and
  all matching wall times of one gap share that one slot (a daily 02:30 job in
  America/New_York fires at 03:00 EDT on 2024-03-10).

Slots are strictly increasing instants: no instant is a slot twice.

How lookups stay bounded: the *high-water* wall time of an instant is the latest wall time
the clock has shown at or before it (its own wall time, except in the second pass of an
overlap, where it is the wall time just before the clocks went back). The matching wall
times the clock has reached by an instant, shown or skipped in a gap, are exactly those up
to its high-water mark, so one croniter step from that mark finds a fixed job's slot and a
wildcard job's first-pass slot; a wildcard job then adds the second pass of the overlap
around the instant (or, looking back, around that candidate). Gaps and overlaps are read
from ``zoneinfo`` (a wall time's offsets with fold=0 and fold=1 differ) and the transition
instant by bisection between the two readings. A lookup costs one or two croniter steps
and a few ``zoneinfo`` calls. ``slots_between`` walks one croniter iterator while the offset
is the same at both ends of a step of at most 30 h, relying on tzdata never changing a
zone's offset twice within 30 h (checked on tzdata 2025b and 2026f: the closest are 95 h
apart).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from functools import cached_property
from typing import Literal

from croniter import CroniterBadDateError, CroniterError, croniter

from qinglong.shared.errors import ValidationError
from qinglong.shared.zones import excerpt, load_zone

ScheduleKind = Literal["cron", "boot", "once"]

SKIP_COUNT_CAP = 1000
"""``Due.skipped`` never exceeds this; counting stops there (``Due.skipped_capped``)."""

_MARGIN_S = 30 * 3600  # no zone changes its offset twice within this (module docstring)
_MAX_TEXT = 200
_EPOCH = datetime(1970, 1, 1)
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ALIAS_FIELDS = {  # croniter's aliases; only @hourly is a wildcard job
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_HASHED = re.compile(r"(?:^|,)[HR](?:$|[(/,])", re.IGNORECASE)
_SCHEDULE_HINT = "schedule must have 5 fields, or 6 with seconds first"


def _seconds(offset: timedelta | None) -> int:
    return int(offset.total_seconds()) if offset is not None else 0  # ZoneInfo always answers


@dataclass(frozen=True)
class Due:
    """What ``Schedule.due`` decided (docs/protocols.md §3.7). All instants are Unix ms.

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
    zone: tzinfo = field(repr=False, compare=False)

    @cached_property
    def wildcard(self) -> bool:
        """True for cron(8)'s wildcard jobs, which follow the wall clock through DST.

        A cron whose minute or hour field begins with ``*`` (``*``, ``*/5``; ``@hourly``);
        False for fixed jobs (``30 1 * * *``, ``@daily``) and for boot/once schedules.
        Source: cronie's MIN_STAR/HR_STAR, issue 10 item 2, module docstring.
        """
        if self.kind != "cron":
            return False
        fields = _ALIAS_FIELDS.get(self.expression, self.expression).split()
        return fields[-5].startswith("*") or fields[-4].startswith("*")

    def latest_slot_at_or_before(self, now_ms: int) -> int | None:
        """Newest slot instant (Unix ms) <= ``now_ms``; None for boot/once or no slot.

        Slots follow cron(8)'s daylight-saving rule (module docstring, docs/protocols.md §3.7).
        """
        if self.kind != "cron":
            return None
        latest = self._latest_at_or_before(now_ms // 1000)
        return None if latest is None else latest * 1000

    def next_slot_after(self, t_ms: int) -> int | None:
        """First slot instant (Unix ms) strictly after ``t_ms``; None for boot/once or none.

        Slots follow cron(8)'s daylight-saving rule (module docstring, docs/protocols.md §3.7).
        """
        if self.kind != "cron":
            return None
        first = self._next_after(t_ms // 1000)
        return None if first is None else first * 1000

    def next_slots(self, after_ms: int, count: int) -> list[int]:
        """The next ``count`` slot instants (Unix ms) strictly after ``after_ms``,
        increasing (what ``task next`` shows, in both profiles); fewer when the schedule
        runs out, none for boot/once schedules."""
        slots: list[int] = []
        at = after_ms
        while len(slots) < count:
            nxt = self.next_slot_after(at)
            if nxt is None:
                break
            slots.append(nxt)
            at = nxt
        return slots

    def slots_between(self, after_ms: int, until_ms: int) -> Iterator[int]:
        """Yield the slot instants (Unix ms) in (``after_ms``, ``until_ms``], increasing.

        The same slots as repeated ``next_slot_after`` calls, faster: while the UTC offset
        stays put one croniter iterator walks the wall clock. Lazy; the caller bounds how
        many it takes. Nothing for boot/once schedules (module docstring, docs/protocols.md §3.7).
        """
        if self.kind != "cron":
            return
        limit = until_ms // 1000
        slot = self._next_after(after_ms // 1000)
        it: croniter | None = None
        offset = 0
        while slot is not None and slot <= limit:
            yield slot * 1000
            if it is None:
                offset = self._offset_at(slot)
                it = self._cron(slot + offset)
            try:
                wall: int | None = int(it.get_next(float))
            except CroniterBadDateError:
                wall = None
            following = None if wall is None else wall - offset
            # Same offset at both ends of a step <= 30 h: no transition in between (module
            # docstring), so the clock shows ``wall`` at ``following`` and no other slot
            # comes first; a fixed job must also be at the first pass of ``wall``.
            if following is None or not (
                following - slot <= _MARGIN_S
                and self._offset_at(following) == offset
                and (self.wildcard or self._folds(following + offset)[0] == offset)
            ):
                it, following = None, None
            slot = following if following is not None else self._next_after(slot)

    def due(self, cursor_ms: int | None, now_ms: int, misfire_grace_ms: int) -> Due:
        """Decide what fires at ``now_ms`` given the last handled slot (docs/protocols.md §3.7).

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

    # Below, instants and wall times are whole seconds; a wall time is naive local seconds
    # since 1970-01-01T00:00 (no zone). For a wall time, ``first``/``second`` are its UTC
    # offsets read with fold=0/fold=1: equal, it occurs once; first > second, twice (an
    # overlap: instants wall - first and wall - second); first < second, never (a gap).

    @cached_property
    def _parsed(self) -> croniter:
        """The expression parsed once; never iterated itself (``_cron`` copies it)."""
        return croniter(self.expression, 0.0, second_at_beginning=self.has_seconds)

    def _cron(self, wall_s: int) -> croniter:
        """A fresh croniter at ``wall_s``: a shallow copy skips re-parsing (about half the
        cost of a lookup); the parsed fields it shares are only read."""
        it = copy.copy(self._parsed)
        it.set_current(float(wall_s), force=True)
        return it

    def _step(self, wall_s: int, forward: bool) -> int | None:
        """The cron wall time strictly after (or before) ``wall_s``; None if there is none."""
        try:
            it = self._cron(wall_s)
            return int(it.get_next(float) if forward else it.get_prev(float))
        except CroniterBadDateError:
            return None

    def _offset_at(self, t: int) -> int:
        """UTC offset (s) in force at instant ``t``."""
        return _seconds(datetime.fromtimestamp(t, tz=self.zone).utcoffset())

    def _folds(self, wall_s: int) -> tuple[int, int]:
        """UTC offsets (s) of a wall time read with fold=0 and with fold=1."""
        local = (_EPOCH + timedelta(seconds=wall_s)).replace(tzinfo=self.zone)
        return _seconds(local.utcoffset()), _seconds(local.replace(fold=1).utcoffset())

    def _transition(self, lo: int, hi: int) -> int:
        """The instant in (lo, hi] where the offset changes; offsets at lo and hi differ."""
        after = self._offset_at(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if self._offset_at(mid) == after else (mid, hi)
        return hi

    def _high_water(self, t: int) -> int:
        """Latest wall time shown at or before instant ``t`` (see module docstring)."""
        wall = t + self._offset_at(t)
        first, second = self._folds(wall)
        if first > second and t == wall - second:  # second pass of an overlap
            return self._transition(wall - first, t) + first - 1
        return wall

    def _fixed_instant(self, wall: int) -> int:
        """A fixed job's slot for a matching wall time: first pass, or the end of its gap."""
        first, second = self._folds(wall)
        if first < second:
            return self._transition(wall - second, wall - first)
        return wall - first

    def _next_after(self, t: int) -> int | None:
        """First slot instant (s) > ``t``."""
        wall = self._step(self._high_water(t), True)
        if not self.wildcard:
            return None if wall is None else self._fixed_instant(wall)
        while wall is not None:  # first passes; a wall time in a gap has none
            first, second = self._folds(wall)
            if first >= second:
                break
            wall = self._step(self._transition(wall - second, wall - first) + second - 1, True)
        first_pass = None if wall is None else wall - self._folds(wall)[0]
        candidates = [first_pass, self._second_pass_after(t)]
        return min((c for c in candidates if c is not None), default=None)

    def _second_pass_after(self, t: int) -> int | None:
        """A wildcard job's first second-pass slot > ``t`` of the overlap ``t`` is in."""
        wall = t + self._offset_at(t)
        first, second = self._folds(wall)
        if first <= second:
            return None
        # The repeated wall times are [change + second, change + first); the second pass of
        # wall time w is the instant w - second, after t when w > t + second.
        change = self._transition(wall - first, wall - second)
        match = self._step(max(change + second, t + second + 1) - 1, True)
        return None if match is None or match >= change + first else match - second

    def _latest_at_or_before(self, t: int) -> int | None:
        """Newest slot instant (s) <= ``t``."""
        wall = self._step(self._high_water(t) + 1, False)
        if not self.wildcard:
            return None if wall is None else self._fixed_instant(wall)
        while wall is not None:
            first, second = self._folds(wall)
            if first == second:
                return wall - first
            if first < second:  # in a gap: the last match before it
                wall = self._step(self._transition(wall - second, wall - first) + first, False)
                continue
            # Overlap: a second pass at or before t of a repeated wall time <= this one wins.
            change = self._transition(wall - first, wall - second)
            last = wall if wall - second <= t else self._step(t + second + 1, False)
            if last is not None and last >= change + second:
                return last - second
            return wall - first
        return None

    def _count_slots(self, lo_ms: int, hi_ms: int) -> tuple[int, bool]:
        """Slots strictly between lo_ms and hi_ms, counted up to SKIP_COUNT_CAP: (n, capped)."""
        count = 0
        for _ in self.slots_between(lo_ms, hi_ms - 1):
            if count == SKIP_COUNT_CAP:
                return count, True
            count += 1
        return count, False


#: how many values each cron field has: a larger step is refused (docs/protocols.md §3.7)
_SPAN = {"second": 60, "minute": 60, "hour": 24, "day-of-month": 31, "month": 12,
         "day-of-week": 7}


def _check_cron(fields: list[str]) -> None:
    seconds = len(fields) == 6
    names = (("second",) if seconds else ()) + _FIELDS
    for i, (name, value) in enumerate(zip(names, fields, strict=True)):
        if _HASHED.search(value):
            raise ValidationError("schedule", f"{name} field: H and R values are unsupported")
        probe = ["*"] * len(fields)
        probe[i] = value
        if not croniter.is_valid(" ".join(probe), second_at_beginning=seconds):
            raise ValidationError("schedule", f"{name} field {excerpt(value)} is invalid")
        for part in value.split(","):  # croniter folds */70 to every minute: refused
            step = part.partition("/")[2]
            if step.isdigit() and int(step) > _SPAN[name]:
                raise ValidationError("schedule", f"{name} field {excerpt(value)} has a step "
                                      f"over the field's {_SPAN[name]} values")
    try:
        croniter(" ".join(fields), 0.0, second_at_beginning=seconds).get_next(float)
    except CroniterBadDateError as exc:
        raise ValidationError("schedule", "schedule never matches a real date") from exc
    except CroniterError as exc:
        raise ValidationError("schedule", "schedule is not a valid cron expression") from exc


def parse_schedule(text: str, timezone: str) -> Schedule:
    """Validate a schedule and its IANA time zone (docs/protocols.md §3.7; docs/architecture.md §2).

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
        elif expression not in _ALIAS_FIELDS:
            hint = " (use @boot: once per serve start)" if expression == "@reboot" else ""
            raise ValidationError("schedule", f"unknown alias {excerpt(expression)}{hint}")
    else:
        fields = expression.split()
        if len(fields) not in (5, 6):
            raise ValidationError("schedule", f"{_SCHEDULE_HINT} (got {len(fields)})")
        _check_cron(fields)
        expression = " ".join(fields)
    zone = load_zone(timezone)
    return Schedule(expression, timezone, kind, len(expression.split()) == 6, zone)
