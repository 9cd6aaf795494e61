"""Daylight-saving gaps and overlaps fire once (DESIGN.md §3.7, cron module docstring).

2024 transitions used here:
America/New_York spring-forward 03-10 07:00Z (02:00 EST -> 03:00 EDT),
                 fall-back      11-03 06:00Z (02:00 EDT -> 01:00 EST);
Europe/Berlin    spring-forward 03-31 01:00Z (02:00 CET -> 03:00 CEST),
                 fall-back      10-27 01:00Z (03:00 CEST -> 02:00 CET).
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

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


def test_daily_0230_fires_once_on_spring_forward_day_in_new_york() -> None:
    schedule = parse_schedule("30 2 * * *", "America/New_York")
    fired = slots(schedule, at("2024-03-09T12:00"), at("2024-03-11T12:00"))
    assert fired == [at("2024-03-10T07:30"), at("2024-03-11T06:30")]
    assert local(fired[0], "America/New_York") == "03-10 03:30:00 EDT"


def test_daily_0130_fires_once_on_fall_back_day_in_new_york() -> None:
    schedule = parse_schedule("30 1 * * *", "America/New_York")
    fired = slots(schedule, at("2024-11-02T12:00"), at("2024-11-04T12:00"))
    assert fired == [at("2024-11-03T05:30"), at("2024-11-04T06:30")]
    assert local(fired[0], "America/New_York") == "11-03 01:30:00 EDT"
    # During the repeated hour (01:45 EST) the latest slot is still the first 01:30.
    assert schedule.latest_slot_at_or_before(at("2024-11-03T06:45")) == at("2024-11-03T05:30")


def test_daily_0230_fires_once_on_spring_forward_day_in_berlin() -> None:
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    fired = slots(schedule, at("2024-03-30T12:00"), at("2024-04-01T12:00"))
    assert fired == [at("2024-03-31T01:30"), at("2024-04-01T00:30")]
    assert local(fired[0], "Europe/Berlin") == "03-31 03:30:00 CEST"


def test_daily_0230_fires_once_on_fall_back_day_in_berlin() -> None:
    schedule = parse_schedule("30 2 * * *", "Europe/Berlin")
    fired = slots(schedule, at("2024-10-26T12:00"), at("2024-10-28T12:00"))
    assert fired == [at("2024-10-27T00:30"), at("2024-10-28T01:30")]
    assert local(fired[0], "Europe/Berlin") == "10-27 02:30:00 CEST"


TRANSITIONS = [
    ("America/New_York", "spring", at("2024-03-10T07:00")),
    ("America/New_York", "fall", at("2024-11-03T06:00")),
    ("Europe/Berlin", "spring", at("2024-03-31T01:00")),
    ("Europe/Berlin", "fall", at("2024-10-27T01:00")),
]


@pytest.mark.parametrize(("zone", "direction", "transition"), TRANSITIONS)
@pytest.mark.parametrize(
    ("cron", "period_ms"), [("* * * * *", MINUTE_MS), ("*/15 * * * *", 15 * MINUTE_MS)]
)
def test_minute_and_quarter_hour_jobs_fire_once_per_slot_across_dst(
    zone: str, direction: str, transition: int, cron: str, period_ms: int
) -> None:
    schedule = parse_schedule(cron, zone)
    start, end = transition - 3 * HOUR_MS, transition + 3 * HOUR_MS
    fired = slots(schedule, start, end)
    grid = list(range(start + period_ms, end + 1, period_ms))
    if direction == "spring":
        # Every real minute (quarter hour) fires exactly once through the gap.
        expected = grid
    else:
        # The repeated wall-clock hour fires only in its first occurrence.
        expected = [t for t in grid if not transition <= t < transition + HOUR_MS]
    assert fired == expected
    assert all(a < b for a, b in pairwise(fired))
    labels = [local(t, zone)[:14] for t in fired]  # wall clock without the zone name
    assert len(labels) == len(set(labels))


@pytest.mark.parametrize(("zone", "direction", "transition"), TRANSITIONS)
def test_latest_and_next_agree_around_each_slot_across_dst(
    zone: str, direction: str, transition: int
) -> None:
    schedule = parse_schedule("*/15 * * * *", zone)
    fired = slots(schedule, transition - 2 * HOUR_MS, transition + 2 * HOUR_MS)
    for previous, slot in pairwise(fired):
        assert schedule.latest_slot_at_or_before(slot) == slot
        assert schedule.latest_slot_at_or_before(slot - 1) == previous
        assert schedule.next_slot_after(slot - 1) == slot
        assert schedule.next_slot_after(previous) == slot


def test_every_second_job_fires_each_real_second_through_a_gap() -> None:
    schedule = parse_schedule("* * * * * *", "America/New_York")
    # 01:59:55 EST .. 03:00:05 EDT: the gap's wall times 02:00:00.. map to 07:00:00Z..
    entering = slots(schedule, at("2024-03-10T06:59:55"), at("2024-03-10T07:00:05"))
    assert entering == list(range(at("2024-03-10T06:59:56"), at("2024-03-10T07:00:06"), 1000))
    # 03:59:55 EDT .. 04:00:05 EDT: wall 03:xx EDT duplicated the gap and was dropped.
    leaving = slots(schedule, at("2024-03-10T07:59:55"), at("2024-03-10T08:00:05"))
    assert leaving == list(range(at("2024-03-10T07:59:56"), at("2024-03-10T08:00:06"), 1000))


def test_due_across_fall_back_counts_the_repeated_hour_once() -> None:
    schedule = parse_schedule("* * * * *", "America/New_York")
    cursor, now = at("2024-11-03T04:00"), at("2024-11-03T08:00")
    due = schedule.due(cursor, now, misfire_grace_ms=0)
    assert due.fire_slot_ms == now
    # 4 real hours hold 240 minutes; the repeated hour (06:00Z-06:59Z) has no slots.
    assert due.skipped == 240 - 60 - 1
    assert due.new_cursor_ms == now


def test_due_on_spring_forward_day_fires_the_shifted_daily_slot() -> None:
    schedule = parse_schedule("30 2 * * *", "America/New_York")
    due = schedule.due(at("2024-03-09T07:30"), at("2024-03-10T07:30:10"), MINUTE_MS)
    assert due.fire_slot_ms == at("2024-03-10T07:30")
    assert due.skipped == 0


def test_thirty_minute_dst_shift_in_lord_howe_fires_once() -> None:
    # Australia/Lord_Howe moves by 30 minutes: 2024-10-06 02:00 -> 02:30 (+10:30 -> +11).
    schedule = parse_schedule("*/10 * * * *", "Australia/Lord_Howe")
    transition = at("2024-10-05T15:30")
    fired = slots(schedule, transition - HOUR_MS, transition + HOUR_MS)
    assert fired == list(
        range(transition - 50 * MINUTE_MS, transition + HOUR_MS + 1, 10 * MINUTE_MS)
    )


def test_skipped_calendar_day_in_apia_fires_the_daily_job_once() -> None:
    # Pacific/Apia skipped 2011-12-30 entirely (-10:00 -> +14:00 at 2011-12-30T10:00Z).
    schedule = parse_schedule("30 2 * * *", "Pacific/Apia")
    fired = slots(schedule, at("2011-12-28T00:00"), at("2012-01-02T00:00"))
    assert fired == [
        at("2011-12-28T12:30"),
        at("2011-12-29T12:30"),
        at("2011-12-30T12:30"),  # wall 12-30 02:30 (nonexistent) -> 12-31 02:30 +14
        # wall 12-31 02:30 +14 is the same instant again: dropped, not fired twice
        at("2011-12-31T12:30"),  # 01-01 02:30 +14
        at("2012-01-01T12:30"),  # 01-02 02:30 +14
    ]


def test_dropped_post_gap_slot_is_never_reported_as_latest_in_lord_howe() -> None:
    # 2024-10-06 02:00 +10:30 -> 02:30 +11. Walls 02:00 and 02:20 fall in the gap and map to
    # 15:30Z and 15:50Z; wall 02:40 (+11) maps to 15:40Z, before 15:50Z, and is dropped.
    schedule = parse_schedule("*/20 2 * * *", "Australia/Lord_Howe")
    fired = slots(schedule, at("2024-10-05T12:00"), at("2024-10-06T12:00"))
    assert fired == [at("2024-10-05T15:30"), at("2024-10-05T15:50")]
    assert schedule.latest_slot_at_or_before(at("2024-10-05T15:55")) == at("2024-10-05T15:50")
    assert schedule.latest_slot_at_or_before(at("2024-10-06T12:00")) == at("2024-10-05T15:50")
