"""The panel's message catalogs (docs/panel.md "Languages"): one per language, same keys,
and every key a template uses is in both."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qinglong.panel import i18n

TEMPLATES = Path(i18n.__file__).parent / "templates"
KEY_USE = re.compile(r"""\bt\[\s*["']([a-z_.]+)["']\s*\]""")


def test_both_catalogs_have_exactly_the_same_keys() -> None:
    zh, en = i18n.catalog("zh-CN"), i18n.catalog("en")
    assert sorted(set(zh) - set(en)) == []
    assert sorted(set(en) - set(zh)) == []
    assert all(value.strip() for value in [*zh.values(), *en.values()])


def test_every_key_the_templates_use_is_in_every_catalog() -> None:
    used = {key for path in TEMPLATES.glob("*.html") for key in KEY_USE.findall(path.read_text())}
    assert len(used) > 20  # the scan is real
    for lang in i18n.LANGUAGES:
        assert sorted(used - set(i18n.catalog(lang))) == [], lang


@pytest.mark.parametrize(("cookie", "accept", "lang"), [
    (None, None, "zh-CN"),
    (None, "en-US,en;q=0.9", "en"),
    (None, "fr-FR, en;q=0.5, zh;q=0.8", "zh-CN"),
    (None, "zh-Hans-CN", "zh-CN"),
    (None, "de-DE", "zh-CN"),
    ("en", "zh-CN", "en"),
    ("xx", "en", "en"),
])
def test_language_is_the_switch_then_accept_language_then_chinese(
        cookie: str | None, accept: str | None, lang: str) -> None:
    assert i18n.negotiate(cookie, accept) == lang


def test_every_run_status_has_a_name_in_every_catalog() -> None:
    from qinglong.shared.statuses import RunStatus

    for lang in i18n.LANGUAGES:
        names = i18n.catalog(lang)
        assert sorted(s.value for s in RunStatus if f"status.{s.value}" not in names) == [], lang
    assert i18n.catalog("zh-CN")["status.succeeded"] == "成功"


def test_a_backticked_command_in_a_message_is_code_and_the_rest_escaped() -> None:
    """The ``codes`` filter (``i18n.code_spans``): `ql3 local serve` shows as code, not as
    backticks, and a message's own markup characters stay text."""
    from qinglong.panel.i18n import code_spans

    assert str(code_spans("请执行 `ql3 local web --set-password` <b>")) == (
        "请执行 <code>ql3 local web --set-password</code> &lt;b&gt;")
    assert str(code_spans("`<x>`")) == "<code>&lt;x&gt;</code>"
    assert str(code_spans("an odd ` one")) == "an odd ` one"
