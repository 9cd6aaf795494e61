"""The cluster panel's task form reads the API's refusals as field, reason code and limits
(control/qinglong/control/panel_tasks.py; docs/panel.md "Cluster"): the API's own models
and ``task_store.check_definition`` decide, no value is carried."""

from __future__ import annotations

import pytest

from qinglong.control import panel_tasks
from qinglong.control.api.task_models import TaskCreate
from qinglong.panel.backend import BackendRefusedError


def _problems(body: dict[str, object]) -> list[dict[str, object]]:
    with pytest.raises(BackendRefusedError) as refused:
        panel_tasks._validated(TaskCreate, body)
    assert refused.value.usage
    return sorted(refused.value.problems, key=lambda p: str(p["field"]))


def test_model_refusals_carry_codes_and_limits_never_values() -> None:
    found = _problems({"name": "京东/签到", "shell": "echo 秘密值", "max_attempts": 0,
                       "env": {"1BAD": {"value": "秘密值"}}, "labels": {"平台": "jd"},
                       "concurrency_policy": "sometimes"})
    assert found == [
        {"field": "concurrency_policy", "code": "literal_error",
         "params": {"expected": "'forbid', 'allow' or 'replace'"}},
        {"field": "env.1BAD", "code": "env_name", "params": {}},
        {"field": "labels.平台", "code": "label_key", "params": {}},
        {"field": "max_attempts", "code": "greater_than_equal", "params": {"ge": "1"}},
        {"field": "name", "code": "name_rule", "params": {}}]
    assert "秘密值" not in str(found)


@pytest.mark.parametrize(("schedule", "zone", "problem"), [
    ("0 61 * * *", "Asia/Shanghai", ("schedule", "schedule", {"part": "hour"})),
    ("0 8 * * * * *", "Asia/Shanghai", ("schedule", "schedule", {})),
    ("@boot", "Asia/Shanghai", ("schedule", "boot", {})),
    ("0 8 * * *", "Asia/Shanghia", ("timezone", "timezone", {"guess": "Asia/Shanghai"})),
])
def test_the_preview_refuses_by_the_apis_definition_rules(
        schedule: str, zone: str, problem: tuple[str, str, dict[str, str]]) -> None:
    with pytest.raises(BackendRefusedError) as refused:
        panel_tasks.preview(schedule, zone, 5)
    field, code, params = problem
    assert refused.value.problems == [{"field": field, "code": code, "params": params}]


def test_the_preview_lists_slots_with_seconds_in_utc() -> None:
    slots = panel_tasks.preview("30 0 9 * * *", "Asia/Shanghai", 5)["slots"]
    assert len(slots) == 5 and all(s.endswith("T01:00:30Z") for s in slots)
