"""A wall-clock step on a real `ql3 local serve` under libfaketime (SERVICES.md's
libfaketime recipe): the wall clock is stepped back two hours while serve runs, then set
right about ten seconds later. The test harness itself runs unfaked and steps the clock by
rewriting FAKETIME_TIMESTAMP_FILE.

`scripts/test.sh` installs `faketime` (apt) on a fresh machine; without the library this
test fails (it is never skipped)."""

from __future__ import annotations

import datetime as dt
import glob
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

from harness import QL3, Ql3, wait_for
from qinglong.local.app.client import SocketBackend

HOUR_MS = 3_600_000


def _libfaketime() -> str:
    """The thread-safe build, libfaketimeMT: serve reads the clock from several threads,
    and the plain build parses the timestamp file into a static buffer that another
    thread can overwrite mid-parse (libfaketime pull request 547): a clean run once read
    offset 0 for one tick at -2h and recorded a spurious forward and backward step."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1")
                   + glob.glob("/usr/lib/faketime/libfaketimeMT.so.1"))
    assert found, "libfaketime is missing: `apt-get install -y faketime` (scripts/test.sh does)"
    return found[0]


def _slots(ql3: Ql3) -> list[int]:
    """Scheduled slots (Unix ms) of task `tick`, oldest run first."""
    runs = json.loads(ql3.run("local", "runs", "--task", "tick", "--limit", "500",
                              "--json").stdout)
    return [int(dt.datetime.fromisoformat(r["scheduled_at"].replace("Z", "+00:00"))
                .timestamp() * 1000) for r in reversed(runs)]


def _set_offset(stamp: Path, offset: str) -> None:
    """Write libfaketime's offset file atomically (a temporary file renamed over it): with
    FAKETIME_NO_CACHE serve re-reads it at every clock call, and a truncate-then-write let
    it read an empty file once — offset 0, a spurious forward and backward step."""
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(offset + "\n")
    os.replace(tmp, stamp)


def _start_faked_serve(ql3: Ql3, stamp: Path) -> subprocess.Popen[str]:
    env = dict(ql3.env, LD_PRELOAD=_libfaketime(), FAKETIME_DONT_FAKE_MONOTONIC="1",
               FAKETIME_TIMESTAMP_FILE=str(stamp), FAKETIME_NO_CACHE="1")
    log = open(ql3.data_dir.parent / "serve.log", "a")  # noqa: SIM115 - closed below
    with log:
        proc = subprocess.Popen([QL3, "local", "serve"], env=env, stdout=log, stderr=log,
                                text=True)
    sock = str(ql3.data_dir / "ql3.sock")
    up = wait_for(lambda: proc.poll() is not None or (
        SocketBackend.probe(sock)
        and ql3.run("local", "recovery", "status", check=False).returncode == 0), 20)
    assert up and proc.poll() is None, ql3.serve_log()
    return proc


def test_a_clock_stepped_back_two_hours_and_set_right_keeps_the_schedule(
    ql3: Ql3, tmp_path: Path
) -> None:
    stamp = tmp_path / "faketime"
    _set_offset(stamp, "+0")
    ql3.run("local", "task", "add", "tick", "--schedule", "*/2 * * * * *", "--", "true")
    serve = _start_faked_serve(ql3, stamp)
    try:
        assert wait_for(lambda: len(_slots(ql3)) >= 2, 15), ql3.serve_log()

        _set_offset(stamp, "-2h")  # step back two hours
        stepped_at = time.time() * 1000
        # each poll starts a ql3 process (seconds on a loaded machine): 15 s is a few polls
        past = wait_for(lambda: [s for s in _slots(ql3) if s < stepped_at - HOUR_MS], 15)
        assert past, f"no run within 15 s of the step back: {_slots(ql3)}"
        time.sleep(max(0.0, 10 - (time.time() * 1000 - stepped_at) / 1000))

        _set_offset(stamp, "+0")  # set right
        fixed_at = time.time() * 1000
        resumed = wait_for(lambda: [s for s in _slots(ql3) if s >= fixed_at - 2_000], 15)
        assert resumed, f"no run within 15 s of the correction: {_slots(ql3)}"
        assert wait_for(lambda: len([s for s in _slots(ql3) if s >= fixed_at]) >= 2, 8)

        slots = _slots(ql3)
        assert len(slots) == len(set(slots)), "a (task, slot) fired twice"
        events = ql3.json("local", "task", "show", "tick")["events"]
        assert "clock_step" in [e["kind"] for e in events], events
        shown = ql3.run("local", "task", "show", "tick").stdout  # what a user reads
        assert "clock stepped backward: next fire time re-evaluated" in shown, shown
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)  # the serve process itself, not a wrapper
        assert serve.wait(30) == 0, ql3.serve_log()

    db = sqlite3.connect(f"file:{ql3.data_dir / 'ql3.db'}?mode=ro", uri=True)
    try:
        steps = [json.loads(d) for (d,) in db.execute(
            "SELECT detail FROM events WHERE kind = 'clock_step' AND task_id IS NULL"
            " ORDER BY id")]
        duplicates = db.execute(
            "SELECT count(*) FROM (SELECT 1 FROM runs WHERE scheduled_at_ms IS NOT NULL"
            " GROUP BY task_id, scheduled_at_ms HAVING count(*) > 1)").fetchone()[0]
    finally:
        db.close()
    assert [s["direction"] for s in steps] == ["backward", "forward"], steps
    assert abs(abs(int(steps[0]["step_ms"])) - 2 * HOUR_MS) < 5_000, steps
    assert duplicates == 0
