"""The run page's facts from either backend's ``run_get`` shape, and the Tasks list state a
bulk action carries back (docs/panel.md "Run detail", "Pages")."""

from __future__ import annotations

from qinglong.panel import i18n
from qinglong.panel.run_facts import attempt_facts, run_reference
from qinglong.panel.task_pages import list_state

ZH = i18n.catalog("zh-CN")


def test_reference_is_name_hash_number_else_the_short_id() -> None:
    assert run_reference({"id": "01a2375e-fb00-7", "task": "京东签到", "number": 3}) == "京东签到#3"
    assert run_reference({"id": "01a2375e-fb00-7", "task_name": "x", "number": 1}) == "x#1"
    assert run_reference({"id": "01a2375e-fb00-7777", "number": None}) == "01a2375e-fb00"


def test_attempt_facts_exit_code_signal_duration_and_odd_fields() -> None:
    run = {"attempts": [
        {"number": 1, "status": "failed", "exit_code": 3, "signal": None,
         "started_at": "2026-12-02T08:00:00Z", "finished_at": "2026-12-02T08:01:05.5Z"},
        {"number": 2, "status": "failed", "exit_code": None, "signal": 9, "reason": "oom",
         "started_at": "2026-12-02T08:02:00+00:00", "finished_at": None},
        {"number": 3, "status": "lost", "started_at": "not a time", "finished_at": "x"}]}
    first, second, third = attempt_facts(run, ZH)
    assert (first["exit"], first["duration"]) == ("3", "1 分 5 秒")
    assert second["exit"] == "信号 SIGKILL (9)" and second["duration"] == ""
    assert second["reason"] == "oom"
    assert third["exit"] == "" and third["duration"] == ""


def test_list_state_keeps_the_lists_own_parameters_only() -> None:
    assert list_state("q=jd_&offset=50&done=3&failed=0&evil=1&q=other") == [
        ("q", "jd_"), ("offset", "50")]
    assert list_state("") == []
    assert list_state("q=" + "x" * 500) == [("q", "x" * 200)]
