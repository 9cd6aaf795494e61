"""``ql3 local task list`` as a new user reads it, through the real ``ql3`` at COLUMNS=80
(shared/display.py): long names that share their start stay told apart when cut, names sort
naturally (``task2`` before ``task10``), and ``--wide`` aligns its columns by screen width
(a Chinese character takes two columns)."""

from __future__ import annotations

import pytest

from harness import Ql3
from qinglong.shared.display import ELLIPSIS, text_width

pytestmark = pytest.mark.integration

FARM = "京东签到每日领取京豆任务并且顺便领取东东农场的水滴"  # 25 characters, 50 columns
NAMES = [FARM + "甲", FARM + "乙", "task10", "task2", "task1", "京东 ＡＢＣ１２３ ｶﾀｶﾅ"]


def _add_all(ql3: Ql3) -> None:
    for name in NAMES:
        ql3.run("local", "task", "add", name, "--schedule", "0 8 * * *", "--label",
                "平台=京东", "--", "sh", "-c", "echo 签到成功，获得京豆 10 个")


def _names_column(lines: list[str]) -> list[str]:
    """The NAME cell of each row (names here have no two spaces in a row)."""
    return [line.split("  ")[0] for line in lines[1:]]


def test_cut_names_stay_distinct_and_sort_naturally_at_80_columns(ql3: Ql3) -> None:
    ql3.env.update(COLUMNS="80", TZ="Asia/Shanghai")
    _add_all(ql3)
    lines = ql3.run("local", "task", "list").stdout.splitlines()
    assert all(text_width(line) <= 80 for line in lines), lines
    shown = _names_column(lines)
    assert shown[:3] == ["task1", "task2", "task10"], shown
    farm = [cell for cell in shown if cell.startswith("京东签到")]
    assert len(farm) == 2 and farm[0] != farm[1], lines  # were both `京东签到每日领取京…`
    assert all(ELLIPSIS in cell for cell in farm), farm  # they were cut, not widened
    assert {cell[-1] for cell in farm} == {"甲", "乙"}, farm  # the end that tells them apart
    listed = [t["name"] for t in ql3.json("local", "task", "list")]
    assert listed[:3] == ["task1", "task2", "task10"], listed


def test_wide_columns_line_up_by_screen_width(ql3: Ql3) -> None:
    """Every cell of ``--wide`` starts at the screen column of its header, whatever the wide
    (京, full-width ＡＢＣ１２３) or narrow (half-width ｶﾀｶﾅ) characters before it."""
    ql3.env.update(COLUMNS="80", TZ="Asia/Shanghai")
    _add_all(ql3)
    lines = ql3.run("local", "task", "list", "--wide").stdout.splitlines()
    assert any(line.startswith(FARM + "甲") for line in lines), lines  # whole

    def starts(line: str) -> list[int]:
        """The screen columns where a cell starts (after two spaces, or at 0)."""
        found, col = [], 0
        for i, char in enumerate(line):
            if char != " " and (i == 0 or line[i - 2:i] == "  "):
                found.append(col)
            col += text_width(char)
        return found

    heads = starts(lines[0])
    for line in lines[1:]:
        # a row's cells start at header columns (an empty LAST RUN cell leaves one out)
        assert set(starts(line)) <= set(heads), (lines[0], line)
        assert len(starts(line)) >= len(heads) - 1, (lines[0], line)
