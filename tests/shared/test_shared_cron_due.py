"""Misfire grace, skip counting and cursors of ``Schedule.due`` (docs/protocols.md §3.7)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from qinglong.shared.cron import SKIP_COUNT_CAP, Schedule, parse_schedule
from qinglong.shared.errors import ValidationError

SECOND_MS = 1000
MINUTE_MS = 60 * SECOND_MS
DAY_MS = 24 * 60 * MINUTE_MS


def at(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


EVERY_MINUTE = parse_schedule("* * * * *", "UTC")


def test_brand_new_task_fires_nothing_from_the_past() -> None:
    now = at("2024-05-01T10:05:30")
    due = EVERY_MINUTE.due(None, now, misfire_grace_ms=DAY_MS)
    assert due.fire_slot_ms is None
    assert due.skipped == 0
    assert due.skipped_capped is False
    assert due.new_cursor_ms == now


def test_on_time_tick_fires_the_slot_with_nothing_skipped() -> None:
    cursor = at("2024-05-01T10:04:00")
    slot = at("2024-05-01T10:05:00")
    due = EVERY_MINUTE.due(cursor, slot, misfire_grace_ms=0)
    assert due.fire_slot_ms == slot
    assert due.skipped == 0
    assert due.new_cursor_ms == slot


def test_latest_missed_slot_within_grace_fires_and_older_ones_are_skipped() -> None:
    due = EVERY_MINUTE.due(at("2024-05-01T10:00:00"), at("2024-05-01T10:05:30"), MINUTE_MS)
    assert due.fire_slot_ms == at("2024-05-01T10:05:00")
    assert due.skipped == 4  # 10:01, 10:02, 10:03, 10:04
    assert due.skipped_capped is False
    assert due.new_cursor_ms == at("2024-05-01T10:05:00")


def test_latest_slot_exactly_at_grace_still_fires() -> None:
    due = EVERY_MINUTE.due(at("2024-05-01T10:04:00"), at("2024-05-01T10:05:30"), 30 * SECOND_MS)
    assert due.fire_slot_ms == at("2024-05-01T10:05:00")
    assert due.skipped == 0


def test_all_missed_slots_beyond_grace_fire_nothing_but_are_counted() -> None:
    due = EVERY_MINUTE.due(at("2024-05-01T10:00:00"), at("2024-05-01T10:05:30"), 10 * SECOND_MS)
    assert due.fire_slot_ms is None
    assert due.skipped == 5  # 10:01 .. 10:05
    assert due.new_cursor_ms == at("2024-05-01T10:05:00")


def test_no_slot_since_cursor_fires_nothing_and_keeps_the_cursor() -> None:
    cursor = at("2024-05-01T10:05:00")
    due = EVERY_MINUTE.due(cursor, at("2024-05-01T10:05:59"), DAY_MS)
    assert (due.fire_slot_ms, due.skipped, due.new_cursor_ms) == (None, 0, cursor)


def test_clock_moved_backwards_keeps_the_cursor() -> None:
    cursor = at("2024-05-01T10:05:00")
    due = EVERY_MINUTE.due(cursor, at("2024-05-01T09:00:00"), DAY_MS)
    assert (due.fire_slot_ms, due.skipped, due.new_cursor_ms) == (None, 0, cursor)


def test_every_two_seconds_slot_math() -> None:
    schedule = parse_schedule("*/2 * * * * *", "UTC")
    due = schedule.due(10_000, 19_500, misfire_grace_ms=1_500)
    assert due.fire_slot_ms == 18_000
    assert due.skipped == 3  # 12 s, 14 s, 16 s
    assert due.new_cursor_ms == 18_000
    late = schedule.due(10_000, 19_500, misfire_grace_ms=1_499)
    assert (late.fire_slot_ms, late.skipped) == (None, 4)
    assert schedule.due(18_000, 19_999, 1_000).fire_slot_ms is None
    assert schedule.due(18_000, 20_000, 0).fire_slot_ms == 20_000


@pytest.mark.parametrize(
    ("now_s", "skipped", "capped"),
    [(1000, 999, False), (1001, 1000, False), (1002, 1000, True), (5000, 1000, True)],
)
def test_skip_count_is_exact_below_the_cap_and_capped_above(
    now_s: int, skipped: int, capped: bool
) -> None:
    schedule = parse_schedule("* * * * * *", "UTC")
    due = schedule.due(0, now_s * SECOND_MS, misfire_grace_ms=DAY_MS)
    assert due.fire_slot_ms == now_s * SECOND_MS
    assert (due.skipped, due.skipped_capped) == (skipped, capped)


def test_every_second_schedule_after_seven_days_downtime_is_bounded_and_capped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The week holds 604,800 slots; counting them stops at SKIP_COUNT_CAP, so the slots
    walked stay at the cap whatever the downtime (counted, not timed)."""
    schedule = parse_schedule("* * * * * *", "Europe/Berlin")
    cursor = at("2024-03-27T00:00:00")  # the week spans the spring-forward on 03-31
    now = cursor + 7 * DAY_MS + 500
    walked = [0]
    slots_between = Schedule.slots_between

    def counted(self: Schedule, after_ms: int, until_ms: int) -> Iterator[int]:
        for slot in slots_between(self, after_ms, until_ms):
            walked[0] += 1
            yield slot

    monkeypatch.setattr(Schedule, "slots_between", counted)
    due = schedule.due(cursor, now, misfire_grace_ms=5 * SECOND_MS)
    assert walked[0] == SKIP_COUNT_CAP + 1  # the cap, and the one that shows it was reached
    assert due.fire_slot_ms == now - 500
    assert due.skipped == SKIP_COUNT_CAP
    assert due.skipped_capped is True
    assert due.new_cursor_ms == now - 500


def test_every_second_downtime_beyond_grace_is_capped_and_fires_nothing() -> None:
    schedule = parse_schedule("* * * * * *", "UTC")
    due = schedule.due(0, 7 * DAY_MS + 900, misfire_grace_ms=100)
    assert due.fire_slot_ms is None
    assert (due.skipped, due.skipped_capped) == (SKIP_COUNT_CAP, True)
    assert due.new_cursor_ms == 7 * DAY_MS


def test_negative_grace_is_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        EVERY_MINUTE.due(0, MINUTE_MS, -1)
    assert caught.value.field == "misfire_grace_ms"


def test_sub_second_instants_round_to_whole_second_slots() -> None:
    schedule = parse_schedule("* * * * * *", "UTC")
    assert schedule.next_slot_after(1_999) == 2_000
    assert schedule.next_slot_after(2_000) == 3_000
    assert schedule.latest_slot_at_or_before(2_999) == 2_000
    assert schedule.latest_slot_at_or_before(-1) == -1_000
