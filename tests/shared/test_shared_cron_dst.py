"""Daylight saving by cron(8)'s own rule (docs/protocols.md §3.7, issue 10 item 2, case C14).

A job whose minute or hour field begins with ``*`` fires at every real instant whose wall time
matches (both passes of a repeated hour; nothing for wall times a gap swallows); a job at a
fixed minute and hour fires once through an overlap and at the transition instant when its
time falls in a gap.

2024 transitions used here (UTC instant; wall clock before -> after):
America/New_York    gap     03-10 07:00Z  02:00 EST    -> 03:00 EDT
                    overlap 11-03 06:00Z  02:00 EDT    -> 01:00 EST
Europe/Berlin       gap     03-31 01:00Z  02:00 CET    -> 03:00 CEST
                    overlap 10-27 01:00Z  03:00 CEST   -> 02:00 CET
Australia/Lord_Howe overlap 04-06 15:00Z  02:00 +11    -> 01:30 +10:30 (a 30-minute shift)
                    gap     10-05 15:30Z  02:00 +10:30 -> 02:30 +11
America/Santiago    overlap 04-07 03:00Z  00:00 -03    -> 23:00 -04 (southern hemisphere)
                    gap     09-08 04:00Z  00:00 -04    -> 01:00 -03
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from typing import NamedTuple
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from qinglong.shared.cron import Schedule, parse_schedule

SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS


def at(text: str) -> int:
    """A UTC ISO time ('2024-03-10T07:30') as Unix ms."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def slots(schedule: Schedule, start_ms: int, end_ms: int) -> list[int]:
    """Every slot in (start, end], walked with next_slot_after."""
    found: list[int] = []
    t = start_ms
    while (nxt := schedule.next_slot_after(t)) is not None and nxt <= end_ms:
        assert nxt > t, "next_slot_after must move forward"
        assert len(found) < 100_000
        found.append(nxt)
        t = nxt
    return found


def local(ms: int, zone: str) -> str:
    return datetime.fromtimestamp(ms / 1000, ZoneInfo(zone)).strftime("%m-%d %H:%M:%S %Z")


def wall_matches_each_real_minute(cron: str, zone: str, start_ms: int, end_ms: int) -> list[int]:
    """Brute force of the wildcard rule: real minutes in (start, end] whose wall time matches."""
    tz = ZoneInfo(zone)
    first = start_ms - start_ms % MINUTE_MS + MINUTE_MS
    return [
        t
        for t in range(first, end_ms + 1, MINUTE_MS)
        if croniter.match(cron, datetime.fromtimestamp(t / 1000, tz).replace(tzinfo=None))
    ]


class Shift(NamedTuple):
    zone: str
    direction: str  # "gap" (clocks go forward) or "overlap" (clocks go back)
    transition_ms: int
    shift_ms: int
    fixed: str  # a daily fixed cron whose wall time falls inside the gap or the repeated time


SHIFTS = [
    Shift("America/New_York", "gap", at("2024-03-10T07:00"), HOUR_MS, "30 2 * * *"),
    Shift("America/New_York", "overlap", at("2024-11-03T06:00"), HOUR_MS, "30 1 * * *"),
    Shift("Europe/Berlin", "gap", at("2024-03-31T01:00"), HOUR_MS, "30 2 * * *"),
    Shift("Europe/Berlin", "overlap", at("2024-10-27T01:00"), HOUR_MS, "30 2 * * *"),
    Shift("Australia/Lord_Howe", "overlap", at("2024-04-06T15:00"), 30 * MINUTE_MS, "45 1 * * *"),
    Shift("Australia/Lord_Howe", "gap", at("2024-10-05T15:30"), 30 * MINUTE_MS, "15 2 * * *"),
    Shift("America/Santiago", "overlap", at("2024-04-07T03:00"), HOUR_MS, "30 23 * * *"),
    Shift("America/Santiago", "gap", at("2024-09-08T04:00"), HOUR_MS, "30 0 * * *"),
]
SHIFT_IDS = [f"{s.zone}-{s.direction}" for s in SHIFTS]


@pytest.mark.parametrize("shift", SHIFTS, ids=SHIFT_IDS)
def test_every_second_job_fires_each_real_second_through_gap_and_repeated_hour(
    shift: Shift,
) -> None:
    schedule = parse_schedule("* * * * * *", shift.zone)
    start = shift.transition_ms - shift.shift_ms - 2 * MINUTE_MS
    end = shift.transition_ms + shift.shift_ms + 2 * MINUTE_MS
    assert slots(schedule, start, end) == list(range(start + SECOND_MS, end + 1, SECOND_MS))


@pytest.mark.parametrize("shift", SHIFTS, ids=SHIFT_IDS)
def test_every_five_minutes_job_keeps_real_five_minute_spacing_across_dst(shift: Shift) -> None:
    schedule = parse_schedule("*/5 * * * *", shift.zone)
    start, end = shift.transition_ms - 3 * HOUR_MS, shift.transition_ms + 3 * HOUR_MS
    assert slots(schedule, start, end) == list(range(start + 5 * MINUTE_MS, end + 1, 5 * MINUTE_MS))


@pytest.mark.parametrize("shift", SHIFTS, ids=SHIFT_IDS)
def test_half_past_every_hour_fires_whenever_the_wall_clock_shows_half_past(shift: Shift) -> None:
    schedule = parse_schedule("30 * * * *", shift.zone)
    start, end = shift.transition_ms - 4 * HOUR_MS, shift.transition_ms + 4 * HOUR_MS
    fired = slots(schedule, start, end)
    assert fired == wall_matches_each_real_minute("30 * * * *", shift.zone, start, end)
    if shift.direction == "overlap":
        # Both passes of the repeated half past: one more slot than distinct wall times.
        labels = {local(t, shift.zone)[:14] for t in fired}
        assert len(fired) == len(labels) + 1


def test_half_past_every_hour_runs_in_each_real_hour_in_new_york() -> None:
    schedule = parse_schedule("30 * * * *", "America/New_York")
    back = slots(schedule, at("2024-11-03T04:00"), at("2024-11-03T08:00"))
    assert [local(t, "America/New_York") for t in back] == [
        "11-03 00:30:00 EDT",
        "11-03 01:30:00 EDT",
        "11-03 01:30:00 EST",
        "11-03 02:30:00 EST",
    ]
    forward = slots(schedule, at("2024-03-10T05:00"), at("2024-03-10T09:00"))
    assert [local(t, "America/New_York") for t in forward] == [
        "03-10 00:30:00 EST",
        "03-10 01:30:00 EST",
        "03-10 03:30:00 EDT",
        "03-10 04:30:00 EDT",
    ]


@pytest.mark.parametrize("shift", SHIFTS, ids=SHIFT_IDS)
def test_fixed_daily_job_fires_once_through_overlap_and_at_the_end_of_a_gap(shift: Shift) -> None:
    schedule = parse_schedule(shift.fixed, shift.zone)
    start, end = shift.transition_ms - 12 * HOUR_MS, shift.transition_ms + 12 * HOUR_MS
    fired = slots(schedule, start, end)
    assert len(fired) == 1
    if shift.direction == "gap":
        assert fired == [shift.transition_ms]
    else:
        # First pass: before the clocks go back, within the repeated span.
        assert shift.transition_ms - shift.shift_ms <= fired[0] < shift.transition_ms
        minute_hour = shift.fixed.split()[1].zfill(2) + ":" + shift.fixed.split()[0].zfill(2)
        assert local(fired[0], shift.zone)[6:11] == minute_hour
    assert schedule.latest_slot_at_or_before(end) == fired[0]


def test_daily_0230_fires_at_0300_edt_on_spring_forward_day_in_new_york() -> None:
    schedule = parse_schedule("30 2 * * *", "America/New_York")
    fired = slots(schedule, at("2024-03-09T12:00"), at("2024-03-11T12:00"))
    assert fired == [at("2024-03-10T07:00"), at("2024-03-11T06:30")]
    assert local(fired[0], "America/New_York") == "03-10 03:00:00 EDT"


def test_daily_0130_fires_once_on_fall_back_day_in_new_york() -> None:
    schedule = parse_schedule("30 1 * * *", "America/New_York")
    fired = slots(schedule, at("2024-11-02T12:00"), at("2024-11-04T12:00"))
    assert fired == [at("2024-11-03T05:30"), at("2024-11-04T06:30")]
    assert local(fired[0], "America/New_York") == "11-03 01:30:00 EDT"
    # During the repeated hour (01:45 EST) the latest slot is still the first 01:30.
    assert schedule.latest_slot_at_or_before(at("2024-11-03T06:45")) == at("2024-11-03T05:30")
    assert schedule.next_slot_after(at("2024-11-03T06:30")) == at("2024-11-04T06:30")


def test_daily_0230_fires_at_0300_cest_on_spring_forward_day_in_berlin() -> None:
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    fired = slots(schedule, at("2024-03-30T12:00"), at("2024-04-01T12:00"))
    assert fired == [at("2024-03-31T01:00"), at("2024-04-01T00:30")]
    assert local(fired[0], "Europe/Berlin") == "03-31 03:00:00 CEST"


def test_times_swallowed_by_one_gap_share_a_single_slot_at_the_transition() -> None:
    # Every quarter of the hour at 02:xx is fixed (minute list, hour 2): the four matching
    # wall times of the gap fire once, at 03:00 EDT, and never again at 03:00.
    schedule = parse_schedule("0,15,30,45 2,3 * * *", "America/New_York")
    fired = slots(schedule, at("2024-03-10T06:00"), at("2024-03-10T09:00"))
    assert [local(t, "America/New_York") for t in fired] == [
        "03-10 03:00:00 EDT",
        "03-10 03:15:00 EDT",
        "03-10 03:30:00 EDT",
        "03-10 03:45:00 EDT",
    ]


def test_every_twenty_minutes_of_hour_two_skips_wall_times_in_the_lord_howe_gap() -> None:
    # 2024-10-06 02:00 +10:30 -> 02:30 +11: walls 02:00 and 02:20 never occur; 02:40 does.
    schedule = parse_schedule("*/20 2 * * *", "Australia/Lord_Howe")
    fired = slots(schedule, at("2024-10-05T12:00"), at("2024-10-06T12:00"))
    assert fired == [at("2024-10-05T15:40")]
    assert local(fired[0], "Australia/Lord_Howe") == "10-06 02:40:00 +11"
    assert schedule.latest_slot_at_or_before(at("2024-10-06T12:00")) == at("2024-10-05T15:40")


def test_skipped_calendar_day_in_apia_fires_the_daily_job_once_right_after_the_jump() -> None:
    # Pacific/Apia skipped 2011-12-30 entirely (-10:00 -> +14:00 at 2011-12-30T10:00Z).
    schedule = parse_schedule("30 2 * * *", "Pacific/Apia")
    fired = slots(schedule, at("2011-12-28T00:00"), at("2012-01-02T00:00"))
    assert fired == [
        at("2011-12-28T12:30"),
        at("2011-12-29T12:30"),
        at("2011-12-30T10:00"),  # wall 12-30 02:30 never occurred: 12-31 00:00 +14
        at("2011-12-30T12:30"),  # 12-31 02:30 +14
        at("2011-12-31T12:30"),  # 01-01 02:30 +14
        at("2012-01-01T12:30"),  # 01-02 02:30 +14
    ]


@pytest.mark.parametrize("shift", SHIFTS, ids=SHIFT_IDS)
@pytest.mark.parametrize("cron", ["*/15 * * * *", "30 * * * *", "0,30 0-3,23 * * *"])
def test_latest_and_next_agree_around_each_slot_across_dst(shift: Shift, cron: str) -> None:
    schedule = parse_schedule(cron, shift.zone)
    fired = slots(schedule, shift.transition_ms - 3 * HOUR_MS, shift.transition_ms + 3 * HOUR_MS)
    assert all(a < b for a, b in pairwise(fired))
    for previous, slot in pairwise(fired):
        assert schedule.latest_slot_at_or_before(slot) == slot
        assert schedule.latest_slot_at_or_before(slot - 1) == previous
        assert schedule.next_slot_after(slot - 1) == slot
        assert schedule.next_slot_after(previous) == slot


@pytest.mark.parametrize("shift", SHIFTS, ids=SHIFT_IDS)
@pytest.mark.parametrize("cron", ["*/7 * * * * *", "*/5 * * * *", "30 * * * *", "0,30 0-3 * * *"])
def test_slots_between_yields_exactly_the_slots_next_slot_after_walks(
    shift: Shift, cron: str
) -> None:
    schedule = parse_schedule(cron, shift.zone)
    start = shift.transition_ms - 4 * HOUR_MS - 500
    end = shift.transition_ms + 4 * HOUR_MS
    walked = slots(schedule, start, end)
    assert list(schedule.slots_between(start, end)) == walked
    assert list(schedule.slots_between(start, walked[-1] - 1)) == walked[:-1]


def test_due_across_fall_back_counts_every_real_minute_of_the_repeated_hour() -> None:
    schedule = parse_schedule("* * * * *", "America/New_York")
    cursor, now = at("2024-11-03T04:00"), at("2024-11-03T08:00")
    due = schedule.due(cursor, now, misfire_grace_ms=0)
    assert due.fire_slot_ms == now
    # 4 real hours hold 240 minutes, the repeated hour's included; the last one fires.
    assert due.skipped == 240 - 1
    assert due.new_cursor_ms == now


def test_due_in_the_second_pass_of_the_repeated_hour_fires_its_slot() -> None:
    schedule = parse_schedule("*/5 * * * *", "America/New_York")
    # 01:30 EST (second pass), cursor at 01:25 EST.
    due = schedule.due(at("2024-11-03T06:25"), at("2024-11-03T06:30:20"), MINUTE_MS)
    assert due.fire_slot_ms == at("2024-11-03T06:30")
    assert due.skipped == 0
    assert due.new_cursor_ms == at("2024-11-03T06:30")


def test_due_on_spring_forward_day_fires_the_daily_slot_at_the_transition() -> None:
    schedule = parse_schedule("30 2 * * *", "America/New_York")
    due = schedule.due(at("2024-03-09T07:30"), at("2024-03-10T07:00:10"), MINUTE_MS)
    assert due.fire_slot_ms == at("2024-03-10T07:00")
    assert due.skipped == 0


def test_case_c14_frequent_jobs_keep_real_time_through_repeated_hour_daily_0130_once() -> None:
    """Case C14: an every-second and an every-5-minutes task keep firing in real time through
    the repeated hour; a daily 01:30 job fires once (America/New_York, 2024-11-03)."""
    zone = "America/New_York"
    start, end = at("2024-11-03T04:00"), at("2024-11-03T08:00")  # 00:00 EDT .. 03:00 EST
    every_second = parse_schedule("* * * * * *", zone)
    seconds = slots(every_second, start, end)
    assert seconds == list(range(start + SECOND_MS, end + 1, SECOND_MS))
    assert len(seconds) == 4 * 3600  # four real hours, the repeated one included
    repeated = [t for t in seconds if local(t, zone)[6:8] == "01" and local(t, zone)[-3:] == "EST"]
    assert len(repeated) == 3600  # 01:00:00 EST .. 01:59:59 EST, the second pass
    every_five = parse_schedule("*/5 * * * *", zone)
    five_minutes = list(range(start + 5 * MINUTE_MS, end + 1, 5 * MINUTE_MS))
    assert slots(every_five, start, end) == five_minutes
    daily = parse_schedule("30 1 * * *", zone)
    assert slots(daily, start, end) == [at("2024-11-03T05:30")]  # 01:30 EDT only


@pytest.mark.parametrize(
    ("text", "wildcard"),
    [
        ("* * * * *", True),
        ("*/5 * * * *", True),
        ("30 * * * *", True),
        ("0 */2 * * *", True),
        ("*/20 2 * * *", True),
        ("@hourly", True),
        ("* * * * * *", True),
        ("0 */10 * * * *", True),  # 6 fields: minute */10
        ("30 1 * * *", False),
        ("0-59 1 * * *", False),  # cron(8) looks at the first character only
        ("* 30 1 * * *", False),  # 6 fields: the seconds field does not count
        ("@daily", False),
        ("@yearly", False),
        ("@boot", False),
    ],
)
def test_wildcard_job_is_one_whose_minute_or_hour_field_begins_with_a_star(
    text: str, wildcard: bool
) -> None:
    assert parse_schedule(text, "UTC").wildcard is wildcard
