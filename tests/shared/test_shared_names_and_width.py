"""Names as people write them (``shared/names.py``), screen width (``shared/display.py``)
and the machine's zone (``shared/zones.py``): the rules both profiles share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qinglong.shared.display import cut, fit_table, shorten, text_width
from qinglong.shared.errors import ValidationError
from qinglong.shared.names import check_name, check_task_labels, is_valid_name, name_key
from qinglong.shared.run_refs import parse_run_ref
from qinglong.shared.zones import machine_zone, suggest_zone


@pytest.mark.parametrize("name", ["京东签到", "每日 签到-2", "backup.daily", "Café", "签到1",
                                  "a" * 128, "ελληνικά_1", "नमस्ते"])
def test_names_of_any_script_are_accepted(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", " 签到", "签到 ", "京东/签到", "签到#3", "签到@last",
                                  "a" * 129, "-x", ".hidden", "签\u200b到", "签\x07到",
                                  "\ue000签到", "签到!", "签\n到"])
def test_names_outside_the_rule_are_refused_in_words(name: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_name(name)
    assert "letters or digits of any language" in str(info.value)
    assert "京东签到" in str(info.value) and info.value.field == "name"


def test_names_are_stored_nfc_and_equal_under_nfkc_casefolding() -> None:
    decomposed = "Cafe\u0301"
    assert check_name(decomposed) == "Café"
    assert name_key("签到１") == name_key("签到1")
    assert name_key("Backup") == name_key("backup")
    assert name_key("京东签到") != name_key("京东签到1")


def test_label_values_follow_the_name_rule_and_keys_stay_ascii() -> None:
    assert check_task_labels({"platform": "京东"}) == {"platform": "京东"}
    with pytest.raises(ValidationError):
        check_task_labels({"平台": "京东"})
    with pytest.raises(ValidationError):
        check_task_labels({"platform": "京东/淘宝"})
    assert not is_valid_name(None)


def test_run_references_take_names_with_spaces() -> None:
    ref = parse_run_ref("每日 签到-2#3")
    assert (ref.kind, ref.task, ref.number) == ("number", "每日 签到-2", 3)
    assert parse_run_ref("京东签到@last").task == "京东签到"


def test_width_counts_wide_characters_twice_and_never_splits_one() -> None:
    assert text_width("京东签到") == 8 and text_width("backup") == 6
    assert text_width("签到１") == 6  # a full-width digit is wide too
    assert cut("京东签到", 5) == "京东"  # 签 would straddle the edge: left out whole
    assert shorten("京东签到成功", 7) == "京东签…"
    assert text_width(shorten("京东签到成功", 8)) <= 8


def test_a_table_of_chinese_names_fits_80_columns() -> None:
    rows = [["京东签到" * 4, "0 8 * * *", "sh -c 'echo 签到成功' " * 3],
            ["每日 签到-2", "0 9 * * *", "true"]]
    lines = fit_table(["name", "schedule", "command"], rows, width=80,
                      flexible=("command", "name"), wide=False)
    assert all(text_width(line) <= 80 for line in lines), lines
    assert lines[2].startswith("每日 签到-2")


def test_the_machine_zone_comes_from_tz_then_the_localtime_link(tmp_path: Path) -> None:
    assert machine_zone({"TZ": "Asia/Shanghai"}, str(tmp_path / "none")) == (
        "Asia/Shanghai", None)
    assert machine_zone({"TZ": ":Europe/Berlin"}, str(tmp_path / "none"))[0] == "Europe/Berlin"
    link = tmp_path / "localtime"
    os.symlink("/usr/share/zoneinfo/Asia/Shanghai", link)
    assert machine_zone({}, str(link)) == ("Asia/Shanghai", None)
    zone, note = machine_zone({}, str(tmp_path / "none"))
    assert zone == "UTC" and note is not None and "--timezone" in note


@pytest.mark.parametrize(("asked", "meant"), [
    ("asia/shanghai", "Asia/Shanghai"), ("CST", "Asia/Shanghai"),
    ("Asia/Beijing", "Asia/Shanghai"), ("Europe/Berlín", "Europe/Berlin")])
def test_an_unknown_zone_gets_a_guess(asked: str, meant: str) -> None:
    assert suggest_zone(asked) == meant


def test_free_labels_keep_order_drop_repeats_and_refuse_what_the_rule_does_not_allow() -> None:
    from qinglong.shared.errors import ValidationError
    from qinglong.shared.names import check_free_labels

    assert check_free_labels(["日常", "env=prod", "日常", "Cafe\u0301"]) == (
        "日常", "env=prod", "Caf\u00e9")
    assert check_free_labels([f"l{i}" for i in range(32)])[-1] == "l31"
    for bad in ([""], [" lead"], ["x" * 129], ["a\nb"], ["zero\u200bwidth"], [1],
                "日常", [f"l{i}" for i in range(33)]):
        with pytest.raises(ValidationError) as caught:
            check_free_labels(bad)
        assert caught.value.field == "labels" and "x" * 20 not in str(caught.value)


def test_names_cut_alike_keep_the_end_that_tells_them_apart() -> None:
    from qinglong.shared.display import shorten_apart

    farm = "京东签到每日领取京豆任务并且顺便领取东东农场的水滴"
    middle = ["京东签到A" + farm[4:], "京东签到B" + farm[4:]]  # differ far from both ends
    for width in (4, 6, 8, 12, 19, 30):
        shown = shorten_apart([farm + "甲", farm + "乙", *middle, "short"], width)
        assert len(set(shown[:4])) == 4, (width, shown)
        assert all(text_width(s) <= width for s in shown), (width, shown)
    assert shorten_apart([farm + "甲", farm + "乙"], 19) == ["京东签到每日…水滴甲",
                                                           "京东签到每日…水滴乙"]
    assert shorten_apart([farm, "backup"], 19) == [shorten(farm, 19), "backup"]  # no clash


def test_names_sort_naturally() -> None:
    from qinglong.shared.display import natural_key

    names = ["task10", "task2", "Task3", "task1", "签到１０", "签到９", "a01", "a1", "a"]
    assert sorted(names, key=natural_key) == [
        "a", "a01", "a1", "task1", "task2", "Task3", "task10", "签到９", "签到１０"]
