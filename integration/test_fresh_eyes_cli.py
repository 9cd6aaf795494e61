"""What a new user following the README met in ``ql3 local``, through the real ``ql3``:
a label with ``=`` is ``key=value`` and needs both (shared/names.py ``check_free_labels``)."""

from __future__ import annotations

import pytest

from harness import Ql3

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("label", ["=", "a=", "=京东", "平台 =京东", "平台= 京东", "=="])
def test_a_label_with_an_empty_key_or_value_is_refused_and_nothing_is_stored(
        ql3: Ql3, label: str) -> None:
    added = ql3.run("local", "task", "add", "签到", "--schedule", "@once", "--label", label,
                    "--", "true", check=False)
    assert added.returncode == 2, (added.stdout, added.stderr)
    assert "a label with '=' is key=value" in added.stderr, added.stderr
    assert "Traceback" not in added.stderr
    assert ql3.json("local", "task", "list") == []
    ql3.run("local", "task", "add", "签到", "--schedule", "@once", "--label", "日常", "--",
            "true")
    edited = ql3.run("local", "task", "edit", "签到", "--label", label, check=False)
    assert edited.returncode == 2 and "key=value" in edited.stderr, edited.stderr
    assert ql3.json("local", "task", "show", "签到")["labels"] == ["日常"]


def test_labels_as_words_and_pairs_are_kept(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "签到", "--schedule", "@once", "--label", "日常",
            "--label", "平台=京东", "--label", "expr=a=b", "--", "true")
    assert ql3.json("local", "task", "show", "签到")["labels"] == ["日常", "平台=京东",
                                                                  "expr=a=b"]
    assert [t["name"] for t in ql3.json("local", "task", "list", "--label", "平台=京东")] == [
        "签到"]
