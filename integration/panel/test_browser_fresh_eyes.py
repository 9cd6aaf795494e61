"""What a new user following the README met in the local panel, in a real browser
(chromium-headless-shell, playwright) against a real ``ql3 local serve`` and ``ql3 local
web``: a task whose output redraws a progress line with ``\\r`` shows that line's last
state in the log view, as a terminal leaves it (docs/panel.md "Run detail"), while
``ql3 local logs`` passes the bytes through unchanged."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from test_browser import World, signed_in_world

from harness import QL3, Ql3

pytestmark = pytest.mark.integration

# a progress bar in pieces a second apart (so the stream splits it), a CRLF line, a line
# partly overwritten, and a coloured progress bar
PROGRESS = ("printf '下载 10%%\\r'; sleep 1; printf '下载 50%%\\r'; sleep 1; "
            "printf '下载 100%%\\n'; printf 'windows line\\r\\n'; printf 'abcdef\\rXY\\n'; "
            "printf '\\033[32m1/3\\033[0m\\r\\033[32m3/3\\033[0m\\n'; echo 完成")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-fresh-eyes") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    ql3.run("local", "task", "add", "进度条", "--schedule", "@once", "--", "sh", "-c",
            PROGRESS)
    with signed_in_world(ql3, chromium) as world:
        yield world


def test_a_progress_line_shows_its_last_state_and_logs_keeps_the_bytes(world: World) -> None:
    queued = world.ql3.json("local", "run", "进度条")
    page = world.page("zh-CN")
    page.goto(f"{world.web.base}/runs/{queued['id']}")
    page.locator("#log[data-done='true']").wait_for(timeout=30_000)
    lines = page.locator("#log .line").all_inner_texts()
    assert lines == ["下载 100%", "windows line", "XYcdef", "3/3", "完成"], lines
    assert page.locator("#log .line .ansi-green-fg").last.inner_text() == "3/3"
    raw = subprocess.run([QL3, "local", "logs", "进度条@last"], env=world.ql3.env,
                         capture_output=True, timeout=60, check=True).stdout  # bytes
    assert raw.startswith("下载 10%\r下载 50%\r下载 100%\nwindows line\r\nabcdef\rXY\n"
                          .encode()), raw
    assert world.csp_errors == [], world.csp_errors[0][:400]
