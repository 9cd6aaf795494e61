"""The owner's refusals on the local task form (docs/panel.md "Task form"): the rules of
shared/names.py, shared/cron.py and local/app/task_input.py are shown from the catalogs in
the viewer's language; what has no key keeps the owner's words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("jinja2")

from qinglong.panel import forms

MESSAGES = Path(forms.__file__).parent / "messages"


@pytest.mark.parametrize(("message", "shown"), [
    ("name: use 1-128 characters: letters or digits", ("name", "cform.err.name_rule")),
    ("schedule: minute field '61' is invalid", ("schedule", "form.err.schedule.minute")),
    ("schedule: day-of-week field '9' is invalid", ("schedule", "form.err.schedule.day_of_week")),
    ("schedule: schedule is not a valid cron expression", ("schedule", "cform.err.schedule")),
    ("timezone: unknown IANA time zone 'Mars/Olympus'", ("timezone", "cform.err.timezone")),
    ("labels: at most 32, each 1-128 characters", ("labels", "form.err.labels")),
    ("timeout: must be more than 0 s and at most 30 days", ("timeout", "form.err.timeout")),
    ("max_attempts: must be between 1 and 100", ("attempts", "form.err.attempts")),
    ("a task with that name already exists: 'x' (names equal …)", ("", "form.err.duplicate_name")),
    ("cwd: '/nope' must be an existing directory",
     ("command", "'/nope' must be an existing directory")),
    ("something else entirely", ("", "something else entirely")),
])
def test_an_owner_refusal_is_shown_by_its_catalog_key(message: str, shown: tuple[str, str]) -> None:
    assert forms.owner_field(message) == shown


def test_every_key_the_form_may_show_is_in_both_catalogs() -> None:
    keys = {*forms.OWNER_KEYS.values(), "form.err.duplicate_name",
            *(f"form.err.schedule.{p}" for p in ("second", "minute", "hour", "day_of_month",
                                                   "month", "day_of_week"))}
    for lang in ("zh-CN", "en"):
        catalog = json.loads((MESSAGES / f"{lang}.json").read_text(encoding="utf-8"))
        assert sorted(keys - catalog.keys()) == [], lang
