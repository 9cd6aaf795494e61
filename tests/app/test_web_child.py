"""``qinglong.local.app.web_child`` (docs/panel.md "Running it"): the restart backoff, the
installed check that imports none of the panel, and a child that dies right after its first
line; the panel itself is tested through the real binary in
integration/panel/test_serve_web.py."""

from __future__ import annotations

import io
import sys
import time
from pathlib import Path

import pytest

from qinglong.local.app.web_child import (
    BACKOFF_CAP_S,
    BACKOFF_FIRST_S,
    HEALTHY_S,
    PanelChild,
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


class _SlowOut(io.StringIO):
    """serve's stdout, slow to take a line (a loaded host): the reader of the link may act
    on it before the copy returns."""

    def write(self, text: str) -> int:
        time.sleep(0.5)
        return super().write(text)


def test_a_child_that_printed_its_link_and_died_at_once_counts_as_started(
        tmp_path: Path) -> None:
    """A panel that printed its first line started, however soon it dies after: start()
    answers None and the supervisor restarts it, rather than serve stopping with 'the web
    panel did not start' (the first line is counted before it is copied out)."""
    out, err = _SlowOut(), io.StringIO()
    child = PanelChild(str(tmp_path), "127.0.0.1:0", out=out, err=err, grace_s=1)
    child.argv = ["/bin/sh", "-c", "echo http://127.0.0.1:1/signin?token=x; exit 9"]
    try:
        assert child.start() is None
        deadline = time.monotonic() + 10
        while "exited with status 9" not in err.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "the web panel exited with status 9; restarting it in" in err.getvalue()
    finally:
        child.stop()
    assert out.getvalue().startswith("http://127.0.0.1:1/signin?token=x\n")
