"""The local demo at COLUMNS=80 (README's main job; ``scripts/demo.sh`` installs the runtime
and then runs ``examples/demo.py`` with the venv's Python, which is what this test runs: the
install step is the bootstrap's, not the demo's). Every line it prints — its own narration,
the ``ql3`` output it shows, the head of each log and the last lines telling how to keep the
schedules running and how to open the web panel — fits 80 screen columns (East Asian wide
characters count 2), also with a data directory whose path is long: the command to copy then
continues on a second line, never cut. The longest path that can fit is 72 columns (the
continuation line's 8 columns of indent): the test's data directory is exactly that long
wherever the temporary directory is (pytest's own temporary path grows with the user name,
the session number and, under pytest-xdist, the worker's directory). Without ``--serve``
the panel is not started (its sign-in token lives in the running panel's memory): the demo
prints the command and where the link points (docs/panel.md "Running it"); with ``--serve``
it ends as ``ql3 local serve --web``, whose one-time sign-in link signs a browser in."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import free_port
from qinglong.shared.display import text_width

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[1]


PATH_COLUMNS = 80 - len("        ")  # the widest data directory an 80-column line holds


@pytest.fixture
def long_data_dir() -> Iterator[Path]:
    """A data directory path (not made) exactly ``PATH_COLUMNS`` wide, in a fresh temporary
    directory removed after the test; its socket path fits the 107 bytes."""
    base = Path(tempfile.mkdtemp(prefix="ql3-demo-")).resolve()
    try:
        pad = PATH_COLUMNS - len(f"{base}/")
        assert pad >= len("demo-data"), f"TMPDIR is too long for this test: {base}"
        yield base / "demo-data".ljust(pad, "x")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_every_line_of_the_local_demo_fits_80_columns(long_data_dir: Path) -> None:
    data = long_data_dir
    assert text_width(str(data)) == PATH_COLUMNS  # the longest that can fit: checked whole
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
    tail = "\n".join(lines[-14:])
    assert f".venv/bin/ql3 local serve --data-dir \\\n        {data}\n" in tail, tail
    assert f".venv/bin/ql3 local runs --data-dir \\\n        {data}\n" in tail, tail
    assert f".venv/bin/ql3 local web --data-dir \\\n        {data}\n" in tail, tail
    assert "It serves http://127.0.0.1:5700/ and prints the one-time sign-in link" in tail
    assert "    http://127.0.0.1:5700/signin?token=…\n" in tail, tail
    assert "not installed" not in tail  # this venv has the panel, as scripts/demo.sh's has
    assert lines[-2:] == ["Or both in one: bash scripts/demo.sh --serve (Ctrl-C stops them).",
                          "See docs/systemd.md to run it as a service."]
    assert lines[:2] == ["== data directory:", f"    {data}"]
    assert "    | backup ok: " in out.stdout  # the log head that was too wide, now cut with …



class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_the_demo_with_serve_ends_with_a_sign_in_link_that_signs_in(tmp_path: Path) -> None:
    """README's main job with ``--serve``: after the same runs, the demo becomes the
    scheduler and the panel; the last thing it prints is the panel's one-time sign-in link,
    which signs a browser in (a session cookie and a redirect to the Tasks page); Ctrl-C
    stops both."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QL3_")}
    env.update(COLUMNS="80", QL3_DATA_DIR=str(tmp_path / "demo-data"))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "demo.py"), "--serve", "--listen",
         f"127.0.0.1:{port}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # ends when the demo exits (a failure: it never serves)
            seen.append(line.rstrip("\n"))
            if line.startswith("ql3 panel: open "):
                break
        link = seen[-1].removeprefix("ql3 panel: open ").strip()
        assert link.startswith(f"http://127.0.0.1:{port}/signin?token="), seen[-20:]
        assert ("== the scheduler and the panel (ql3 local serve --web; Ctrl-C stops both):"
                in seen)
        assert not [line for line in seen if "5700" in line]  # no other panel's address
        opener = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as answer:
            opener.open(link, timeout=30)
        assert answer.value.code == 303, answer.value.code
        assert "ql3_session" in (answer.value.headers.get("Set-Cookie") or "")
        answer.value.close()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        code = proc.wait(60)
        if proc.stdout is not None:
            proc.stdout.close()
    assert code in (0, 130, -signal.SIGINT), (code, seen[-20:])
