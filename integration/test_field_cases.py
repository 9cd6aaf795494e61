"""Cases from the field (shared/cases): C01, C03, C04, C05, C06, C07 on real processes."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Ql3, alive_in_group, wait_for

pytestmark = pytest.mark.integration


def _pgid(run: dict[str, Any]) -> int:
    return int(run["attempts"][-1]["handle"].split(":")[3])


def _overlaps(runs: list[dict[str, Any]]) -> bool:
    spans = sorted(
        (a["started_at"], a["finished_at"] or "9999")
        for r in runs for a in r["attempts"] if a["started_at"]
    )
    return any(end > start for (_, end), (start, _) in itertools.pairwise(spans))


def test_c01_timeout_kills_background_children_on_manual_and_scheduled_runs(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "c01", "--schedule", "@once", "--timeout", "2", "--",
            "sh", "-c", "sleep 300 & sleep 301 & wait")
    manual = ql3.json("local", "run", "c01", check=False)  # no serve: supervised in the foreground
    assert manual["status"] == "timed_out"
    assert alive_in_group(_pgid(manual)) == []
    ql3.run("local", "task", "add", "c01-cron", "--schedule", "* * * * * *", "--timeout", "2",
            "--", "sh", "-c", "sleep 300 & sleep 301 & wait")
    serve = ql3.start_serve()
    try:
        def first_finished() -> dict[str, Any] | None:
            runs = ql3.json("local", "runs", "--task", "c01-cron")
            done = [r for r in runs if r["finished_at"]]
            return done[-1] if done else None

        scheduled = wait_for(first_finished, 15)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert scheduled is not None and scheduled["status"] == "timed_out"
    assert alive_in_group(_pgid(scheduled)) == []


def test_c03_forbid_never_overlaps_and_replace_cancels_the_whole_previous_group(
    ql3: Ql3,
) -> None:
    # an attempt outlasts the one-second period: the slots that come meanwhile are skipped
    ql3.run("local", "task", "add", "c03", "--schedule", "* * * * * *", "--", "sleep", "3")
    serve = ql3.start_serve()
    try:
        def two_attempts_and_a_skip() -> bool:
            attempted = [r for r in ql3.json("local", "runs", "--task", "c03") if r["attempts"]]
            return len(attempted) >= 2 and any(
                e["kind"] == "slot_skipped"
                for e in ql3.json("local", "task", "show", "c03")["events"])

        wait_for(two_attempts_and_a_skip, 30)
        ql3.run("local", "task", "disable", "c03")
        forbid_runs = ql3.json("local", "runs", "--task", "c03")
        shown = ql3.json("local", "task", "show", "c03")
    finally:
        assert ql3.stop_serve(serve) == 0
    assert not _overlaps(forbid_runs)
    assert any(e["kind"] == "slot_skipped" for e in shown["events"])

    ql3.run("local", "task", "add", "c03r", "--schedule", "* * * * * *", "--concurrency",
            "replace", "--", "sh", "-c", "sleep 5 & wait")
    serve = ql3.start_serve()
    try:
        # three started runs: each but the last one was replaced by its successor
        wait_for(lambda: sum(1 for r in ql3.json("local", "runs", "--task", "c03r")
                             if r["attempts"]) >= 3, 30)
        ql3.run("local", "task", "disable", "c03r")
        wait_for(lambda: all(r["finished_at"] or r["status"] == "queued"
                             for r in ql3.json("local", "runs", "--task", "c03r")[1:]), 10)
        replace_runs = ql3.json("local", "runs", "--task", "c03r")
    finally:
        assert ql3.stop_serve(serve) == 0
    assert not _overlaps(replace_runs)
    replaced = [r for r in replace_runs[1:] if r["attempts"]]
    assert len(replaced) >= 2
    for run in replaced:
        assert run["status"] == "cancelled", run
        assert alive_in_group(_pgid(run)) == []


def test_c04_boot_tasks_run_exactly_once_per_serve_start(ql3: Ql3, tmp_path: Path) -> None:
    for n in range(3):
        ql3.run("local", "task", "add", f"boot{n}", "--schedule", "@boot", "--",
                "sh", "-c", f"echo ran >> {tmp_path}/boot{n}")
    for starts in (1, 2):
        serve = ql3.start_serve()
        try:
            assert wait_for(
                lambda starts=starts: all(
                    (tmp_path / f"boot{n}").exists()
                    and len((tmp_path / f"boot{n}").read_text().split()) == starts
                    for n in range(3)
                ),
                15,
            )
            time.sleep(1.5)
        finally:
            assert ql3.stop_serve(serve) == 0
        for n in range(3):
            assert (tmp_path / f"boot{n}").read_text().split() == ["ran"] * starts


def test_c05_a_symlinked_log_directory_fails_the_launch_before_spawn(
    ql3: Ql3, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    outside = tmp_path / "outside"
    outside.mkdir()
    import json

    task = json.loads(ql3.run("local", "task", "add", "c05", "--schedule", "@once", "--json",
                              "--", "touch", str(marker)).stdout)
    log_dir = ql3.data_dir / "logs" / task["id"]
    log_dir.parent.mkdir(exist_ok=True)
    os.symlink(outside, log_dir)
    run = ql3.json("local", "run", "c05", check=False)
    assert run["status"] == "failed"
    assert run["exit_code"] is None  # nothing ran, so no exit code is invented
    assert not marker.exists()
    assert list(outside.iterdir()) == []
    detail = ql3.json("local", "inspect", run["id"])
    failed = [e for e in detail["events"] if e["kind"] == "attempt_failed"]
    assert failed and "launch_error" in failed[0]["detail"]


def test_c07_a_wrapper_killed_before_its_receipt_makes_the_attempt_lost(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "c07", "--schedule", "@once", "--", "sleep", "30")
    serve = ql3.start_serve()
    try:
        ql3.run("local", "run", "c07")
        running = wait_for(
            lambda: (r := ql3.json("local", "runs", "--task", "c07")[0])["status"] == "running"
            and r, 10,
        )
        assert running
        wrapper_pid = int(running["attempts"][0]["handle"].split(":")[2])
        os.kill(wrapper_pid, signal.SIGKILL)
        final = wait_for(
            lambda: (r := ql3.json("local", "runs", "--task", "c07")[0])["finished_at"] and r, 10
        )
    finally:
        assert ql3.stop_serve(serve) == 0
    assert final["status"] == "lost"
    assert final["exit_code"] is None
    assert alive_in_group(wrapper_pid) == []


@contextlib.contextmanager
def _tiny_filesystem(path: Path, size: str) -> Iterator[None]:
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                              str(path)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): " + mounted.stderr.decode())
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_c06_a_full_disk_fails_cleanly_and_the_command_never_runs(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to mount a small filesystem")
    mount = tmp_path / "small"
    marker = tmp_path / "marker"
    with _tiny_filesystem(mount, "4m"):
        runner = Ql3(mount / "data")
        runner.run("local", "init", "--data-dir", str(mount / "data"))
        runner.run("local", "task", "add", "c06", "--schedule", "@once", "--", "touch",
                   str(marker))
        # suppress outermost: closing the filler flushes its buffer into the full disk too
        with contextlib.suppress(OSError), open(mount / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        result = runner.run("local", "run", "c06", check=False)
        assert result.returncode == 1
        assert "disk is full" in result.stderr
        assert not marker.exists()
        (mount / "filler").unlink()
        runs = runner.json("local", "runs")
        assert all(r["status"] != "succeeded" for r in runs)
