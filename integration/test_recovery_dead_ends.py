"""Recovery dead ends (issue 10 item 7, case C20) through the real `ql3`: a corrupt stored
handle, an unreadable receipt shard, the startup refusal's counts and the wrapper's leftover
temporary receipt. Rows are corrupted with sqlite3 as a field corruption would."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Ql3, alive_in_group, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def sentinel() -> Iterator[subprocess.Popen[bytes]]:
    """A live process whose pid a corrupt handle names: nothing may ever signal it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield proc
    proc.kill()
    proc.wait()


def leave_running(ql3: Ql3, count: int, *argv: str) -> list[dict[str, Any]]:
    """``count`` runs left running by a serve killed with SIGKILL (oldest first)."""
    ql3.run("local", "task", "add", "left", "--schedule", "@once", "--concurrency", "allow",
            "--", *argv)
    serve = ql3.start_serve()
    try:
        for _ in range(count):
            ql3.run("local", "run", "left")
        assert wait_for(lambda: [r["status"] for r in ql3.json("local", "runs")]
                        == ["running"] * count, 15)
    finally:  # a failed wait must not leave the serve running after the test
        serve.send_signal(signal.SIGKILL)
        serve.wait(10)
    return list(reversed(ql3.json("local", "runs")))


def pgid_of(run: dict[str, Any]) -> int:
    return int(run["attempts"][0]["handle"].split(":")[3])


def kill_group(run: dict[str, Any]) -> None:
    pgid = pgid_of(run)
    assert pgid > 1
    os.killpg(pgid, signal.SIGKILL)
    assert wait_for(lambda: not alive_in_group(pgid), 10)


def corrupt_handle(ql3: Ql3, run: dict[str, Any], handle: str | None) -> None:
    with sqlite3.connect(ql3.data_dir / "ql3.db") as conn:
        conn.execute("UPDATE attempts SET handle = ? WHERE run_id = ?", (handle, run["id"]))
    conn.close()


def shard_of(ql3: Ql3, run: dict[str, Any]) -> Path:
    return ql3.data_dir / "receipts" / run["attempts"][0]["id"][-2:]


def symlink_shard(ql3: Ql3, run: dict[str, Any], outside: Path) -> None:
    """Replace the run's receipt shard by a symlink to a directory outside the data dir."""
    shard = shard_of(ql3, run)
    for entry in shard.iterdir():
        entry.unlink()
    shard.rmdir()
    outside.mkdir()
    (outside / "decoy.receipt").write_text("keep me")
    shard.symlink_to(outside)


def distinct_shards(ql3: Ql3, runs: list[dict[str, Any]]) -> None:
    if len({shard_of(ql3, r) for r in runs}) != len(runs):
        pytest.skip("two attempts share a receipt shard (1 in 256): the scenario needs two")


def test_c20_resolve_settles_a_pgid_1_handle_once_the_attempt_lock_is_free_signalling_nothing(
    ql3: Ql3, sentinel: subprocess.Popen[bytes]
) -> None:
    [run] = leave_running(ql3, 1, "sleep", "300")
    real = run["attempts"][0]["handle"].split(":")
    corrupt_handle(ql3, run, f"ql3lp1:{real[1]}:{sentinel.pid}:1:{real[4]}")
    try:
        refused = ql3.run("local", "serve", check=False, timeout=30)
        assert refused.returncode == 1 and "startup recovery required" in refused.stderr
        held = ql3.run("local", "recovery", "resolve", run["id"], "--as", "lost", check=False)
        assert held.returncode == 1
        assert "still holds its attempt lock" in held.stderr and "holder(s)" in held.stderr
        assert ql3.json("local", "inspect", run["id"])["status"] == "running"
        assert sentinel.poll() is None
    finally:
        kill_group(run)  # the operator stops the attempt's real processes
    [resolved] = ql3.json("local", "recovery", "resolve", run["id"], "--as", "lost")
    assert (resolved["status"], resolved["source"]) == ("lost", "operator")
    final = ql3.json("local", "inspect", run["id"])
    details = [e["detail"] or {} for e in final["events"]]
    assert any(d.get("handle") == "corrupt" and d.get("lock") == "free" for d in details)
    assert sentinel.poll() is None, "nothing was signalled through the corrupt handle"
    serve = ql3.start_serve()  # the refusal was resolvable
    assert ql3.stop_serve(serve) == 0


@pytest.mark.parametrize("handle", [
    "ql3lp1:{boot}:0:{pid}:{ticks}",
    "ql3lp1:{boot}:-7:-7:{ticks}",
    "ql3lp1:{boot}:99999999999:99999999999:{ticks}",
    "garbage",
], ids=["pid_0", "pid_negative", "pid_huge", "garbage"])
def test_resolve_settles_other_corrupt_handles_by_the_free_attempt_lock(
    ql3: Ql3, handle: str
) -> None:
    [run] = leave_running(ql3, 1, "sleep", "300")
    _, boot, pid, _, ticks = run["attempts"][0]["handle"].split(":")
    kill_group(run)
    corrupt_handle(ql3, run, handle.format(boot=boot, pid=pid, ticks=ticks))
    [resolved] = ql3.json("local", "recovery", "resolve", run["id"], "--as", "failed")
    assert resolved["status"] == "failed"


def test_recovery_status_verbose_reports_one_unreadable_receipt_shard_and_the_other_runs(
    ql3: Ql3, tmp_path: Path
) -> None:
    runs = leave_running(ql3, 2, "sleep", "300")
    distinct_shards(ql3, runs)
    for run in runs:
        kill_group(run)
    outside = tmp_path / "outside"
    symlink_shard(ql3, runs[1], outside)
    view = ql3.json("local", "recovery", "status", "--verbose")
    evidence = {d["run_id"]: d["attempts"][0] for d in view["details"]}
    bad, good = evidence[runs[1]["id"]], evidence[runs[0]["id"]]
    assert (bad["receipt"], bad["receipt_unreadable"]) == ("unreadable", "unsafe_path")
    assert (bad["lock"], bad["lock_unreadable"]) == ("unreadable", "unsafe_path")
    assert (good["receipt"], good["lock"]) == ("none", "free")
    assert good["process"] in ("gone", "zombie")  # an orphan may wait to be reaped
    text = ql3.run("local", "recovery", "status", "--verbose")
    assert "receipt unreadable (unsafe_path)" in text.stdout
    assert str(outside) not in text.stdout + text.stderr
    assert (outside / "decoy.receipt").read_text() == "keep me"


def test_startup_refusal_counts_only_the_runs_left_undecided_and_each_is_resolvable(
    ql3: Ql3, tmp_path: Path
) -> None:
    settled, unreadable, corrupt = leave_running(ql3, 3, "sleep", "300")
    distinct_shards(ql3, [settled, unreadable, corrupt])
    for run in (settled, unreadable, corrupt):
        kill_group(run)
    symlink_shard(ql3, unreadable, tmp_path / "outside")
    corrupt_handle(ql3, corrupt, "ql3lp1:garbage")
    refused = ql3.run("local", "serve", check=False, timeout=30)
    assert refused.returncode == 1
    assert ("2 run(s) in dispatching/running with 2 active attempt(s) need a decision"
            in refused.stderr)
    assert ql3.json("local", "inspect", settled["id"])["status"] == "lost"
    [done] = ql3.json("local", "recovery", "resolve", corrupt["id"], "--as", "lost")
    assert done["status"] == "lost"
    blocked = ql3.run("local", "recovery", "resolve", unreadable["id"], "--as", "lost",
                      check=False)
    assert blocked.returncode == 1
    assert "cannot be read safely (unsafe_path)" in blocked.stderr
    assert str(tmp_path) not in blocked.stderr
    shard_of(ql3, unreadable).unlink()  # the operator repairs the receipt directory
    [done] = ql3.json("local", "recovery", "resolve", unreadable["id"], "--as", "lost")
    assert done["status"] == "lost"
    serve = ql3.start_serve()
    assert ql3.stop_serve(serve) == 0


def test_a_temporary_receipt_left_beside_a_published_receipt_is_removed_at_recovery(
    ql3: Ql3,
) -> None:
    """A wrapper killed between link() and unlink() leaves its temporary file beside the
    receipt; the recovery that settles the run from the receipt removes both."""
    go = ql3.data_dir.parent / "go"  # the task ends once the serve is gone (no 1 s race)
    [run] = leave_running(ql3, 1, "sh", "-c",
                          f'while [ ! -e "{go}" ]; do sleep 0.05; done; exit 3')
    go.touch()
    attempt_id = run["attempts"][0]["id"]
    receipt = shard_of(ql3, run) / f"{attempt_id}.receipt"
    assert wait_for(receipt.exists, 15)
    temp = shard_of(ql3, run) / f".{attempt_id}.receipt.tmp"
    temp.write_bytes(receipt.read_bytes())
    serve = ql3.start_serve()
    try:
        final = ql3.json("local", "inspect", run["id"])
    finally:
        assert ql3.stop_serve(serve) == 0
    assert (final["status"], final["exit_code"]) == ("failed", 3)
    assert not receipt.exists()
    assert not temp.exists()


def test_resolve_of_several_runs_settles_each_it_can_and_names_each_refusal(ql3: Ql3) -> None:
    """From a fresh user's trial: with several ids, resolve stopped at the first refusal
    (never trying the rest) and did not say that earlier ones had been settled."""
    alive, gone = leave_running(ql3, 2, "sleep", "300")
    try:
        kill_group(gone)  # its processes are gone (no receipt); the other's still run
        done = ql3.run("local", "recovery", "resolve", alive["id"], gone["id"], "--as", "lost",
                       check=False)
        assert done.returncode == 1
        assert f"ql3: error: run {alive['id']}: " in done.stderr
        assert "still running" in done.stderr and gone["id"] not in done.stderr
        assert f"run {gone['id']}: lost (from operator)" in done.stdout
        assert ql3.json("local", "inspect", gone["id"])["status"] == "lost"
        assert ql3.json("local", "inspect", alive["id"])["status"] == "running"
    finally:
        kill_group(alive)
    [settled] = ql3.json("local", "recovery", "resolve", alive["id"], "--as", "lost")
    assert (settled["status"], settled["refused"]) == ("lost", None)
