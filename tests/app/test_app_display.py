"""What ``ql3 local`` prints for people (issue 12 items 3 and 4): durations, times with the
viewer's offset, tables that never pass the width, event details without Unix ms."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest

from qinglong.local.app import display, output


@pytest.fixture
def shanghai() -> Iterator[None]:
    """The process's zone is Asia/Shanghai (UTC+8, no daylight saving) for one test."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Shanghai"
    time.tzset()
    yield
    if before is None:
        os.environ.pop("TZ")
    else:
        os.environ["TZ"] = before
    time.tzset()
    display.DISPLAY.utc = False


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "-"), (0, "0s"), (0.9, "0s"), (45, "45s"), (65, "1m 05s"), (3599, "59m 59s"),
    (7380, "2h 03m"), (273_600, "3d 04h"), (-5, "0s"),
])
def test_durations_read_like_1m_05s(seconds: float | None, text: str) -> None:
    assert display.duration(seconds) == text


def test_a_time_reads_in_the_viewers_zone_with_its_offset_or_in_utc(shanghai: None) -> None:
    assert display.when("2026-12-01T01:09:01.123Z") == "2026-12-01 09:09:01 +08:00"
    display.DISPLAY.utc = True
    assert display.when("2026-12-01T01:09:01.123Z") == "2026-12-01 01:09:01 +00:00"
    assert display.when(None) == "-"


def test_offsets_west_of_greenwich_and_half_hours_keep_their_sign() -> None:
    from datetime import timedelta

    assert display.offset_text(timedelta(hours=-3, minutes=-30)) == "-03:30"
    assert display.offset_text(timedelta(hours=5, minutes=45)) == "+05:45"
    assert display.offset_text(None) == "+00:00"


def test_a_table_too_wide_shrinks_its_flexible_column_first_and_never_passes_the_width() -> None:
    rows = [["backup#1", "succeeded", "sh -c 'tar czf /backup/a.tgz /srv/data --exclude cache'"]]
    lines = display.fit_table(["run", "status", "command"], rows, width=40,
                              flexible=("command",), wide=False)
    assert max(map(len, lines)) <= 40
    assert lines[1].startswith("backup#1  succeeded  sh -c") and lines[1].endswith("…")
    tight = display.fit_table(["run", "status", "command"], rows * 2, width=24, wide=False)
    assert max(map(len, tight)) <= 24
    wide = display.fit_table(["run", "status", "command"], rows, width=40, wide=True)
    assert rows[0][2] in wide[1]


def test_event_details_read_as_pairs_with_times_not_unix_milliseconds() -> None:
    display.DISPLAY.utc = True
    try:
        text = output.event_detail(json.dumps({"deadline_at_ms": 1_800_000_000_000,
                                               "signal": None, "step_ms": 2500, "ok": True}))
    finally:
        display.DISPLAY.utc = False
    assert text == "deadline_at=2027-01-15 08:00:00 +00:00 step=2.5s ok=yes"


def test_task_show_fields_say_yes_no_and_dash_never_python_reprs() -> None:
    assert output.field("enabled", True) == "      enabled: yes"
    assert output.field("cwd", None) == "          cwd: -"
    assert output.field("timeout_s", 65.0) == "    timeout_s: 1m 05s"


def test_a_command_is_shown_shell_quoted() -> None:
    assert display.command(["sh", "-c", "echo it's"]) == "sh -c 'echo it'\"'\"'s'"


def test_a_long_value_goes_whole_under_its_label_unless_wide() -> None:
    from qinglong.shared.display import field_lines

    label = "    data dir: "
    path = "/srv/青龙/" + "d" * 60  # 74 columns alone, 88 behind the label
    assert field_lines(label, "/srv/ql", width=80) == [label + "/srv/ql"]
    assert field_lines(label, path, width=80) == ["    data dir:", "  " + path]
    longer = path + "e" * 10  # 84 columns: whole on its own line, never cut
    assert field_lines(label, longer, width=80) == ["    data dir:", longer]
    display.DISPLAY.wide = True
    try:
        assert field_lines(label, path, width=80) == [label + path]
    finally:
        display.DISPLAY.wide = False


def test_an_event_detail_reads_the_same_as_an_object_or_as_json_text() -> None:
    detail = {"exit_code": 3, "timed_out": False, "error": None}
    assert output.event_detail(detail) == output.event_detail(json.dumps(detail)) \
        == "exit_code=3 timed_out=no"
