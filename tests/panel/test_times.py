"""The panel's instants (docs/panel.md "Times"): a ``<time data-local>`` element whose text is
readable UTC with its offset (the browser's script turns it into the viewer's zone), never
the raw ISO string; anything else passes through escaped."""

from __future__ import annotations

import datetime as dt

import pytest

pytest.importorskip("markupsafe")

from qinglong.panel.times import when


def test_an_iso_instant_becomes_a_local_time_element_with_readable_utc_text() -> None:
    assert str(when("2026-12-03T00:00:00.000Z")) == (
        '<time data-local datetime="2026-12-03T00:00:00Z">2026-12-03 00:00:00 +00:00</time>')
    # another offset is the same instant, shown in UTC until the browser's script runs
    assert str(when("2026-12-03T08:00:00+08:00")) == str(when("2026-12-03T00:00:00Z"))
    aware = dt.datetime(2026, 12, 3, 8, 0, 0, 227000, tzinfo=dt.timezone(dt.timedelta(hours=8)))
    assert ">2026-12-03 00:00:00 +00:00<" in str(when(aware))


def test_nothing_is_empty_and_text_that_is_no_instant_is_escaped_as_it_is() -> None:
    assert when(None) == "" and when("") == ""
    assert when("<script>") == "<script>"  # a plain str: Jinja's autoescape escapes it
    from markupsafe import Markup
    assert not isinstance(when("<script>"), Markup)
