"""The one-command cluster demo end to end (issue 13 item 3; README "See the cluster work").

``scripts/cluster_demo.py`` (what ``bash scripts/cluster-demo`` runs once the venv exists) is
run as a user would: it must exit 0 with every check it makes named in its narration, print
every line within 80 columns (at COLUMNS=80), and leave nothing behind: no process whose
command line names its database or temp dir, no database, no temp dir. A second run is
interrupted (SIGINT, as Ctrl-C) once its replicas are ready: it exits 130 and cleans up the
same way.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from cluster_kit import LOCAL_PG, pg_url

from qinglong.shared.display import text_width

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.drill]

DEMO = Path(__file__).resolve().parents[2] / "scripts" / "cluster_demo.py"


def procs_naming(*needles: str) -> list[str]:
    """Command lines of live processes holding any of ``needles``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        text = cmdline.decode(errors="replace")
        if any(n in text for n in needles):
            found.append(f"{name}: {text}")
    return found


def database_exists(name: str) -> bool:
    with psycopg.connect(pg_url("postgres", "postgres", LOCAL_PG), connect_timeout=10) as conn:
        return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            (name,)).fetchone() is not None


def assert_left_nothing(output: str) -> None:
    db = re.search(r"database (ql3c_\w+) migrated", output)
    tmp = re.search(r"temp dir (\S+)\s", output)
    assert db and tmp, output
    assert not Path(tmp[1]).exists(), f"{tmp[1]} left behind"
    assert not database_exists(db[1]), f"database {db[1]} left behind"
    assert not procs_naming(db[1], tmp[1]), procs_naming(db[1], tmp[1])


def test_the_demo_shows_every_claim_and_leaves_nothing_behind() -> None:
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run([sys.executable, str(DEMO)], capture_output=True, text=True,
                         timeout=240, check=False, env=env)
    output = out.stdout + out.stderr
    assert out.returncode == 0, output[-6000:]
    # every line it prints fits 80 screen columns (East Asian wide characters count 2)
    wide = [(text_width(line), line) for line in output.splitlines() if text_width(line) > 80]
    assert not wide, wide
    for claim in (r"ok: runs succeeded on both workers: \d+ on w1, \d+ on w2",
                  r"ok: slow#1 runs on (w1|w2): pids",
                  r"ok: its processes are gone \d+\.\d s after the kill",
                  r"ok: (w1|w2) moved to the other replica",
                  r"ok: attempt 1 lost on (w1|w2), attempt 2 succeeded on (w1|w2)",
                  r"ok: \d+ runs created after the kills succeeded on (w1|w2)",
                  r"ok: every run is terminal: \d+ succeeded",
                  r"\$ ql3 cluster logs 'slow#1'\n(  .*\n)*  slow: done",
                  r"ok: every attempt of report ran the pushed bundle sha256:[0-9a-f]{12}",
                  r"every check held", r"elapsed \d+ s; exit 0"):
        assert re.search(claim, output), (claim, output[-6000:])
    assert_left_nothing(output)


def test_ctrl_c_stops_everything_it_started() -> None:
    proc = subprocess.Popen([sys.executable, str(DEMO)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 120
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "workers w1" in line or time.monotonic() > deadline:
                break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(lines) + rest
    assert proc.returncode == 130, output
    assert "interrupted" in output and "elapsed" in output, output
    assert_left_nothing(output)
