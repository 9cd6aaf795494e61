"""``ql3 local task show``'s lines for slots that created no run (issue 10 items 1, 3, 4):
every recorded outcome, misfire and clock-step skips included, reads as one line."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from qinglong.local.app.display import DISPLAY
from qinglong.local.app.output import describe_slot_event

T0 = 1_800_000_000_000  # 2027-01-15T08:00:00Z


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    """As after ``--utc``: the lines do not depend on the zone of the machine running this."""
    DISPLAY.utc = True
    yield
    DISPLAY.utc = False


def _event(kind: str, **detail: object) -> dict[str, object]:
    return {"kind": kind, "detail": json.dumps(detail)}


def test_merged_policy_outcomes_read_as_a_range_with_a_count() -> None:
    line = describe_slot_event(_event("slot_skipped", slot_ms=T0, last_slot_ms=T0 + 9_000,
                                      count=10, reason="backlog_full"))
    assert line == ("slots 2027-01-15 08:00:00 +00:00 .. 2027-01-15 08:00:09 +00:00 (10): "
                    "backlog_full")


def test_missed_slots_say_how_many_up_to_when_and_why() -> None:
    """From a fresh user's trial: misfire and clock-step skips were only in --json."""
    line = describe_slot_event(_event("slots_skipped", skipped=9, at_least=False,
                                      reason="clock_step", after_ms=T0, until_ms=T0 + 600_000))
    assert line == "9 missed slot(s) up to 2027-01-15 08:10:00 +00:00 skipped: clock_step"
    capped = describe_slot_event(_event("slots_skipped", skipped=1000, at_least=True,
                                        reason="misfire"))
    assert capped == "1000 or more missed slot(s) skipped: misfire"


def test_missed_slots_are_named_apart_from_the_one_that_ran() -> None:
    """After a restart the event says which slots were missed, not the one that ran."""
    line = describe_slot_event(_event(
        "slots_skipped", skipped=9, at_least=False, reason="misfire",
        first_missed_ms=T0 + 60_000, last_missed_ms=T0 + 540_000, fired_slot_ms=T0 + 600_000,
        after_ms=T0, until_ms=T0 + 600_000))
    assert line == ("9 missed slot(s) 2027-01-15 08:01:00 +00:00 .. 2027-01-15 08:09:00 +00:00"
                    " skipped: misfire; 2027-01-15 08:10:00 +00:00 ran instead")


def test_a_tasks_clock_step_event_names_the_new_next_fire_time() -> None:
    line = describe_slot_event(_event("clock_step", direction="backward",
                                      next_fire_ms=T0 + 2_000))
    assert line == ("clock stepped backward: next fire time re-evaluated to "
                    "2027-01-15 08:00:02 +00:00")


def test_other_events_have_no_slot_line() -> None:
    assert describe_slot_event(_event("task_created")) is None
    assert describe_slot_event({"kind": "slots_skipped", "detail": None}) is None
