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


# -- owner refusals in the viewer's language (local form refusals) --


def _refusals(tmp_path: Path) -> list[str]:
    """The owner's own refusal texts (``str(exc)``, what the socket carries) for every
    command, environment and secret rule the form can meet, a task changed meanwhile and a
    name a removed task's runs hold: raised by the real code, not copied here."""
    from qinglong.local.app.service import LocalService
    from qinglong.local.storage.migrations import open_database
    from qinglong.local.storage.repository import LocalRunRepository
    from qinglong.shared.errors import QinglongError

    db = open_database(str(tmp_path / "ql3.db"))
    service = LocalService(LocalRunRepository(db), supervised=False)
    out: list[str] = []

    def refused(call: object, *args: object) -> None:
        try:
            call(*args)  # type: ignore[operator]
        except QinglongError as exc:
            out.append(str(exc))
        else:
            raise AssertionError(f"accepted: {args}")

    base = {"name": "签到", "argv": ["true"], "schedule": "0 8 * * *"}
    for bad in ({"argv": []}, {"argv": [" "]}, {"argv": ["a\x00"]}, {"argv": ["x" * 300_000]},
                {"env": {"1BAD": "x"}}, {"env": {"QL3_LAUNCH_X": "x"}}, {"env": {"A": "\x00"}},
                {"secret_env": {"1BAD": {"value": "x"}}},
                {"secret_env": {"QL3_RECEIPT_X": {"value": "x"}}},
                {"secret_env": {"K": {"value": "\x00"}}},
                {"secret_env": {"K": {"variable": "1BAD"}}},
                {"secret_env": {"K": {"variable": "NOPE"}}},
                {"env": {"K": "v"}, "secret_env": {"K": {"value": "x"}}}):
        refused(service.task_add, base | bad)
    service.task_add(base | {"secret_env": {"TOKEN": {"value": "s"}}})
    refused(service.task_edit, "签到", {"env_set": {"TOKEN": "plain"}})
    old = service.repo.get_task("签到")
    service.task_enable("签到", False)
    refused(service.repo.edit_task, old, old, {"changed": ["schedule"]})
    service.task_add(base | {"name": "旧任务"})
    service.run_now("旧任务")
    service.repo.db.write(lambda c: c.execute(  # as if it ran: it keeps its number
        "UPDATE runs SET status = 'cancelled', finished_at_ms = created_at_ms"))
    service.task_rm("旧任务")
    refused(service.task_edit, "签到", {"name": "旧任务"})
    db.close()
    return out


def test_the_owners_other_refusals_reach_the_form_as_catalog_keys(tmp_path: Path) -> None:
    catalogs = [json.loads((MESSAGES / f"{lang}.json").read_text(encoding="utf-8"))
                for lang in ("zh-CN", "en")]
    refusals = _refusals(tmp_path)
    assert len(refusals) == 16
    for message in refusals:
        where, key = forms.owner_field(message)
        assert all(key in catalog for catalog in catalogs), (message, key)
        assert where in ("command", "env", "secret_env", ""), message
