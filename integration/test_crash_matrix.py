"""The crash matrix (issue 3): SIGKILL the real owning `serve` at each durable step, restart,
and check the outcome from durable facts only.

For every point: the right terminal status and exit code; user code ran at most once (the
command appends a line to a marker file); no receipt left and no journal row left unless
its rule keeps it (a terminal attempt whose receipt is gone keeps its row until the
missing-receipt retention); and an unrelated process (a sentinel) is never signalled.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from harness import Ql3, wait_for
from qinglong.shared.faults import ENV_FAULT_POINT

pytestmark = pytest.mark.integration

BEFORE_USER_CODE = ("after_register", "after_spawn", "before_gate")
AFTER_USER_CODE = ("after_gate", "after_exit", "after_receipt", "after_commit", "after_delete")
KEEPS_JOURNAL_ROW = ("after_register", "after_delete")


@pytest.mark.parametrize("repeat", [1, 2, 3])
@pytest.mark.parametrize("point", BEFORE_USER_CODE + AFTER_USER_CODE)
def test_owner_killed_at_each_durable_step_recovers_to_the_right_outcome(
    ql3: Ql3, tmp_path: Path, point: str, repeat: int
) -> None:
    marker = tmp_path / "runs.txt"
    sentinel = subprocess.Popen(["sleep", "120"])
    try:
        ql3.run("local", "task", "add", "job", "--schedule", "@once", "--", "sh", "-c",
                f"echo ran >> {marker}; sleep 0.5; exit 0")
        armed = Ql3(ql3.data_dir)
        armed.env[ENV_FAULT_POINT] = point
        serve = armed.start_serve()
        armed.run("local", "run", "job")
        assert serve.wait(20) == -signal.SIGKILL, "the fault point did not fire"
        # the attempt's own processes may still be finishing: let the wrapper publish
        time.sleep(1.0)
        serve = ql3.start_serve()
        try:
            final = wait_for(
                lambda: (r := ql3.json("local", "runs")[0])["finished_at"] and r, 20
            )
        finally:
            assert ql3.stop_serve(serve) == 0
        ran = marker.read_text().count("ran") if marker.exists() else 0
        if point in BEFORE_USER_CODE:
            assert ran == 0, "user code ran although the start gate never opened"
            assert (final["status"], final["exit_code"]) == ("lost", None)
        else:
            assert ran == 1
            assert (final["status"], final["exit_code"]) == ("succeeded", 0)
        attempt_id = final["attempts"][-1]["id"]
        receipt = ql3.data_dir / "receipts" / attempt_id[-2:] / f"{attempt_id}.receipt"
        assert not receipt.exists(), "a receipt outlived its settled attempt"
        conn = sqlite3.connect(ql3.data_dir / "ql3.db")
        rows = conn.execute("SELECT attempt_id FROM local_completion_receipt_journal").fetchall()
        conn.close()
        # after_register (nothing was ever published) and after_delete (the receipt is
        # already gone): the row waits for the missing-receipt retention (ADR-0069 §4).
        # Every other point leaves no journal row behind.
        assert rows == ([(attempt_id,)] if point in KEEPS_JOURNAL_ROW else [])
        assert sentinel.poll() is None, "an unrelated process was signalled"
    finally:
        sentinel.kill()
        sentinel.wait()
