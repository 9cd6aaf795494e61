"""Zones on a machine without a tz database (issue 12 item 12: tzdata is an extra).

The base install brings no ``tzdata``; zoneinfo then reads only the system's files on
``TZPATH``. These tests hide both and check that UTC still works and that any other zone
fails with a typed error naming the extra.
"""

from __future__ import annotations

import sys
import zoneinfo
from collections.abc import Iterator
from pathlib import Path

import pytest

from qinglong.shared.cron import parse_schedule
from qinglong.shared.errors import TimeZoneNotFoundError, ValidationError
from qinglong.shared.zones import TZDATA_HINT

HOUR_MS = 3_600_000


@pytest.fixture
def no_tz_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """zoneinfo with an empty TZPATH and the tzdata package unimportable."""
    for name in [m for m in sys.modules if m == "tzdata" or m.startswith("tzdata.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tzdata", None)  # import tzdata -> ImportError
    zoneinfo.reset_tzpath([str(tmp_path)])
    zoneinfo.ZoneInfo.clear_cache()
    try:
        yield
    finally:
        zoneinfo.reset_tzpath()
        zoneinfo.ZoneInfo.clear_cache()


@pytest.mark.usefixtures("no_tz_database")
def test_utc_schedules_work_without_any_tz_database() -> None:
    schedule = parse_schedule("0 * * * *", "UTC")
    assert schedule.next_slot_after(0) == HOUR_MS


@pytest.mark.usefixtures("no_tz_database")
def test_another_zone_without_a_tz_database_names_the_tzdata_extra() -> None:
    with pytest.raises(TimeZoneNotFoundError) as caught:
        parse_schedule("0 * * * *", "Asia/Shanghai")
    assert str(caught.value) == (
        "timezone: time zone 'Asia/Shanghai' not found: install the system tz database"
        " or `pip install qinglong[tzdata]`")
    assert caught.value.zone == "Asia/Shanghai" and caught.value.code == "timezone_not_found"
    assert isinstance(caught.value, ValidationError)  # exit 2 / 422 like any bad zone
    assert TZDATA_HINT in str(caught.value)


def test_a_misspelt_zone_with_a_tz_database_is_unknown_not_a_missing_extra() -> None:
    with pytest.raises(TimeZoneNotFoundError) as caught:
        parse_schedule("0 * * * *", "Asia/Shangai")
    assert "unknown IANA time zone 'Asia/Shangai'" in str(caught.value)
    assert "tzdata" not in str(caught.value)


def test_the_system_database_alone_serves_real_zones(monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/usr/share/zoneinfo/Asia/Shanghai").exists():
        pytest.skip("this machine has no system tz database")
    for name in [m for m in sys.modules if m == "tzdata" or m.startswith("tzdata.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tzdata", None)
    zoneinfo.reset_tzpath(["/usr/share/zoneinfo"])
    zoneinfo.ZoneInfo.clear_cache()
    try:
        schedule = parse_schedule("0 9 * * *", "Asia/Shanghai")
        assert schedule.next_slot_after(0) == HOUR_MS  # 09:00 +08:00 is 01:00 UTC
    finally:
        zoneinfo.reset_tzpath()
        zoneinfo.ZoneInfo.clear_cache()
