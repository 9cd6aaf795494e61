"""The local demo at COLUMNS=80 (README's main job; ``scripts/demo.sh`` installs the runtime
and then runs ``examples/demo.py`` with the venv's Python, which is what this test runs: the
install step is the bootstrap's, not the demo's). Every line it prints — its own narration,
the ``ql3`` output it shows, the head of each log and the last lines telling how to keep the
schedules running and how to open the web panel — fits 80 screen columns (East Asian wide
characters count 2), also with a data directory whose path is long: the command to copy then
continues on a second line, never cut. The panel is not started by the demo (its sign-in
token lives in the running panel's memory): it prints the command and where the link points
(docs/panel.md "Running it")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from qinglong.shared.display import text_width

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


def test_every_line_of_the_local_demo_fits_80_columns(tmp_path: Path) -> None:
    data = tmp_path / "demo-data"  # a socket path below it must fit 107 bytes
    assert len(f"    .venv/bin/ql3 local serve --data-dir {data}") > 80  # the check can fail
    env = {k: v for k, v in os.environ.items() if not k.startswith("QL3_")}
    env.update(COLUMNS="80", QL3_DATA_DIR=str(data))
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, (out.stdout[-3000:], out.stderr[-3000:])
    lines = (out.stdout + out.stderr).splitlines()
    wide = [(text_width(line), line) for line in lines if text_width(line) > 80]
    assert not wide, wide
    # the last lines: the commands to copy, the long path on a continuation line, whole
    tail = "\n".join(lines[-13:])
    assert f".venv/bin/ql3 local serve --data-dir \\\n        {data}\n" in tail, tail
    assert f".venv/bin/ql3 local runs --data-dir \\\n        {data}\n" in tail, tail
    assert f".venv/bin/ql3 local web --data-dir \\\n        {data}\n" in tail, tail
    assert "It serves http://127.0.0.1:5700/ and prints the one-time sign-in link" in tail
    assert "    http://127.0.0.1:5700/signin?token=…\n" in tail, tail
    assert "not installed" not in tail  # this venv has the panel, as scripts/demo.sh's has
    assert lines[-1] == "See docs/systemd.md to run it as a service."
    assert lines[:2] == ["== data directory:", f"    {data}"]
    assert "    | backup ok: " in out.stdout  # the log head that was too wide, now cut with …

