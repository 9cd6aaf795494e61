"""What a new user following the README met in the local panel, over a real ``ql3 local
serve`` and a real ``ql3 local web``, through HTTP (docs/panel.md): a label with ``=``
needs a key and a value, refused in the viewer's language; Settings shows times as every
other page does."""

from __future__ import annotations

import html
import re

import pytest
from test_local_pages import FORM, Signed
from test_local_pages import signed as _signed_fixture

pytestmark = pytest.mark.integration
signed = _signed_fixture


def test_a_label_with_an_empty_key_or_value_is_refused_in_chinese(signed: Signed) -> None:
    for labels in ("日常, 平台=", "=京东", "="):
        got = signed.post("/tasks/new", {**FORM, "labels": labels})
        assert got.status_code == 400, (labels, got.status_code, got.text[:300])
        assert "带“=”的标签是 key=value" in got.text, labels
    assert signed.ql3.run("local", "task", "show", "京东签到", check=False).returncode == 2
    made = signed.post("/tasks/new", {**FORM, "labels": "日常, 平台=京东"})
    assert made.status_code == 303, made.text[:300]
    assert signed.ql3.json("local", "task", "show", "京东签到")["labels"] == ["日常",
                                                                           "平台=京东"]


ISO_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}")


def shown_text(page: str) -> str:
    """What a page shows: its text outside tags, scripts and attributes."""
    page = re.sub(r"(?s)<(script|style)\b.*?</\1>", "", page)
    return html.unescape(re.sub(r"<[^>]*>", " ", page))


def test_settings_shows_the_owners_start_as_every_page_shows_times(signed: Signed) -> None:
    """docs/panel.md "Times": ``<time data-local>`` (UTC with its offset, turned into the
    viewer's zone by localtime.js), never a raw ``…Z``."""
    page = signed.http.get("/settings").text
    owner = page.split('id="settings-owner"', 1)[1].split("</dd>", 1)[0]
    assert "<time data-local datetime=" in owner, owner
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \+00:00", owner), owner
    assert not ISO_TEXT.search(shown_text(page)), shown_text(page)


def test_runs_with_an_unknown_status_answer_400_in_chinese_with_the_real_ones(
        signed: Signed) -> None:
    """``/runs?status=bogus`` showed every run as if unfiltered: now a 400 page saying so,
    linking each real status (the task filter kept) and all runs."""
    signed.ql3.run("local", "task", "add", "京东签到", "--schedule", "@once", "--", "true")
    got = signed.http.get("/runs", params={"status": "bogus", "task": "京东签到"})
    assert got.status_code == 400, got.text[:300]
    assert "地址中的运行状态不存在" in got.text
    assert "/runs?task=%E4%BA%AC%E4%B8%9C%E7%AD%BE%E5%88%B0&amp;status=failed" in got.text
    assert "失败" in shown_text(got.text)  # the statuses by their names
    good = signed.http.get("/runs", params={"status": "failed"})
    assert good.status_code == 200


def test_search_matches_the_command_as_shown_across_argv_words(signed: Signed) -> None:
    """A command ``["sh", "-c", "echo hello"]`` is shown ``sh -c 'echo hello'``: a search
    for a phrase of it spanning words finds the task (docs/panel.md "Search")."""
    signed.ql3.run("local", "task", "add", "京东签到", "--schedule", "@once", "--", "sh",
                   "-c", "echo hello")
    signed.ql3.run("local", "task", "add", "备份", "--schedule", "@once", "--", "echo",
                   "sh", "bye")
    for query in ("sh -c", "SH -C 'ECHO", "-c 'echo hello'", "echo hello"):
        page = signed.http.get("/", params={"q": query})
        assert page.status_code == 200
        text = shown_text(page.text)
        assert "京东签到" in text and "备份" not in text, (query, text[-600:])
    assert "备份" in shown_text(signed.http.get("/", params={"q": "echo sh"}).text)
