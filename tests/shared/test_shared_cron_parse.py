"""Parsing and validation of schedules (docs/protocols.md §3.7; docs/architecture.md §2)."""

from __future__ import annotations

import pytest

from qinglong.shared.cron import Schedule, parse_schedule
from qinglong.shared.errors import ValidationError

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


def test_five_field_cron_is_minute_resolution_without_seconds() -> None:
    schedule = parse_schedule("*/5 * * * *", "UTC")
    assert schedule.kind == "cron"
    assert schedule.has_seconds is False
    assert schedule.next_slot_after(0) == 5 * MINUTE_MS
    assert schedule.next_slot_after(5 * MINUTE_MS) == 10 * MINUTE_MS


def test_whitespace_is_normalised_in_the_stored_expression() -> None:
    schedule = parse_schedule("  */5   *\t* * *  ", "UTC")
    assert schedule.expression == "*/5 * * * *"


def test_six_field_cron_every_two_seconds_is_seconds_first() -> None:
    schedule = parse_schedule("*/2 * * * * *", "UTC")
    assert schedule.has_seconds is True
    assert schedule.next_slot_after(10_000) == 12_000
    assert schedule.next_slot_after(11_500) == 12_000
    assert schedule.next_slot_after(12_000) == 14_000
    assert schedule.latest_slot_at_or_before(13_999) == 12_000
    assert schedule.latest_slot_at_or_before(14_000) == 14_000


def test_six_field_cron_reads_the_first_field_as_seconds_not_the_last() -> None:
    # Seconds first: second 30 of minute 0 of every hour. Seconds last would read
    # minute 30, hour 0, ..., second 0.
    schedule = parse_schedule("30 0 * * * *", "UTC")
    assert schedule.next_slot_after(0) == 30_000
    assert schedule.next_slot_after(30_000) == HOUR_MS + 30_000


@pytest.mark.parametrize(
    ("alias", "first_slot_ms"),
    [("@hourly", HOUR_MS), ("@daily", 24 * HOUR_MS), ("@midnight", 24 * HOUR_MS)],
)
def test_croniter_aliases_are_cron_schedules(alias: str, first_slot_ms: int) -> None:
    schedule = parse_schedule(alias, "UTC")
    assert schedule.kind == "cron"
    assert schedule.next_slot_after(0) == first_slot_ms


def test_daily_alias_is_evaluated_in_the_task_time_zone() -> None:
    # Midnight in Asia/Shanghai (+08:00) is 16:00 UTC the day before.
    schedule = parse_schedule("@DAILY", "Asia/Shanghai")
    assert schedule.expression == "@daily"
    assert schedule.next_slot_after(0) == 16 * HOUR_MS


@pytest.mark.parametrize(("text", "kind"), [("@boot", "boot"), ("@once", "once")])
def test_boot_and_once_never_fire_on_schedule(text: str, kind: str) -> None:
    schedule = parse_schedule(text, "Europe/Berlin")
    assert schedule.kind == kind
    assert schedule.has_seconds is False
    assert schedule.next_slot_after(0) is None
    assert schedule.latest_slot_at_or_before(10**12) is None
    due = schedule.due(0, 10**12, 10**12)
    assert (due.fire_slot_ms, due.skipped, due.skipped_capped) == (None, 0, False)
    assert due.new_cursor_ms == 0


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "* * * *",
        "* * * * * * *",
        "60 * * * *",
        "* 24 * * *",
        "* * 32 * *",
        "* * 0 * *",
        "* * * 13 *",
        "* * * * 8",
        "61 * * * * *",
        "*/0 * * * *",
        "1-60 * * * *",
        "not a cron at all",
        "a b c d e",
        "H * * * *",
        "R * * * *",
        "0 H(0-5) * * *",
        "0 0 30 2 *",
        "@reboot",
        "@fortnightly",
        "@",
    ],
)
def test_invalid_schedule_is_rejected_with_validation_error(text: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_schedule(text, "UTC")
    assert caught.value.field == "schedule"


@pytest.mark.parametrize("text", ["* * * *", "* * * * * * *", "*"])
def test_wrong_field_count_message_names_the_accepted_shapes(text: str) -> None:
    with pytest.raises(
        ValidationError, match="schedule must have 5 fields, or 6 with seconds first"
    ):
        parse_schedule(text, "UTC")


def test_error_message_does_not_echo_long_input() -> None:
    secretish = "x" * 120
    with pytest.raises(ValidationError) as caught:
        parse_schedule(f"{secretish} * * * *", "UTC")
    assert "x" * 20 not in str(caught.value)
    with pytest.raises(ValidationError) as caught_zone:
        parse_schedule("* * * * *", f"Europe/{secretish}")
    assert "x" * 20 not in str(caught_zone.value)


def test_out_of_range_message_names_the_field() -> None:
    with pytest.raises(ValidationError, match="hour field"):
        parse_schedule("0 24 * * *", "UTC")
    with pytest.raises(ValidationError, match="second field"):
        parse_schedule("61 0 * * * *", "UTC")


@pytest.mark.parametrize(
    "zone",
    [
        "",
        "Mars/Olympus_Mons",
        "/etc/passwd",
        "/usr/share/zoneinfo/UTC",
        "../../etc/passwd",
        "America/../Europe/Berlin",
        "Europe\\Berlin",
        "Europe/Berlin/",
        "Not A Zone",
    ],
)
def test_unknown_or_path_like_time_zone_is_rejected(zone: str) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_schedule("* * * * *", zone)
    assert caught.value.field == "timezone"


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin"])
def test_known_iana_zone_is_accepted_and_kept(zone: str) -> None:
    schedule = parse_schedule("0 * * * *", zone)
    assert isinstance(schedule, Schedule)
    assert schedule.timezone == zone


def test_schedule_is_immutable() -> None:
    schedule = parse_schedule("* * * * *", "UTC")
    with pytest.raises(AttributeError):
        schedule.kind = "once"  # type: ignore[misc]


def test_crontabs_reboot_alias_is_refused_with_a_hint_to_use_boot() -> None:
    with pytest.raises(ValidationError, match="use @boot"):
        parse_schedule("@reboot", "UTC")


@pytest.mark.parametrize("zone", ["localtime", "posixrules", "right/UTC", "posix/Asia/Shanghai"])
def test_zoneinfo_files_that_are_not_zone_names_are_refused(zone: str) -> None:
    """From a fresh user's trial: these load (files of the system's zoneinfo directory)
    but are no IANA zone a user means; `localtime` would move with the host's setting."""
    with pytest.raises(ValidationError, match="not an IANA time zone name"):
        parse_schedule("0 3 * * *", zone)
