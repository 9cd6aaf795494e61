"""``qinglong.local.app.web_child`` (docs/panel.md "Running it"): the restart backoff and the
installed check that imports none of the panel; the process itself is tested through the
real binary in integration/panel/test_serve_web.py."""

from __future__ import annotations

import sys

import pytest

from qinglong.local.app.web_child import (
    BACKOFF_CAP_S,
    BACKOFF_FIRST_S,
    HEALTHY_S,
    next_backoff,
    panel_installed,
)


def test_backoff_doubles_while_the_panel_keeps_dying_and_resets_after_a_healthy_run() -> None:
    waits = []
    wait = None
    for _ in range(9):
        wait = next_backoff(wait, ran_s=0.5)
        waits.append(wait)
    assert waits == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert BACKOFF_FIRST_S == 1 and BACKOFF_CAP_S == 60
    assert next_backoff(60, ran_s=HEALTHY_S) == BACKOFF_FIRST_S


def test_installed_check_finds_the_panel_without_importing_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m.startswith("qinglong.panel")]:
        monkeypatch.delitem(sys.modules, name)
    assert panel_installed()  # the dev install has qinglong[web]
    assert not [m for m in sys.modules if m.startswith("qinglong.panel")]
    monkeypatch.setitem(sys.modules, "qinglong.panel", None)  # as if not installed
    assert not panel_installed()
    monkeypatch.delitem(sys.modules, "qinglong.panel")
    monkeypatch.setitem(sys.modules, "jinja2", None)  # a dependency missing
    assert not panel_installed()
