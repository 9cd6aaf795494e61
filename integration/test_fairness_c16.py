"""Case C16 (issue 10 item 4) through the real `ql3 local serve` on the edge profile (cap 2):
task A every second, ``allow``, ``sleep 5``; task B every 5 s, ``forbid``; about 30 s."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness import Ql3, wait_for

pytestmark = pytest.mark.integration

WINDOW_S = 30


def _max_alive(runs: list[dict[str, Any]]) -> int:
    """The most attempts alive at one moment, from their started/finished times."""
    edges = []
    for run in runs:
        for attempt in run["attempts"]:
            if attempt["started_at"]:
                edges.append((attempt["started_at"], 1))
                edges.append((attempt["finished_at"] or "9999", -1))
    alive = peak = 0
    for _, step in sorted(edges):  # at equal times the end (-1) sorts before a start
        alive += step
        peak = max(peak, alive)
    return peak


def _slot_events(shown: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(e["kind"], e["detail"]) for e in shown["events"]
            if e["kind"] in ("slot_skipped", "slot_coalesced")]


def test_c16_at_the_edge_cap_a_5s_forbid_task_runs_every_slot_beside_a_piling_allow_task(
    tmp_path: Path,
) -> None:
    data = tmp_path / "edge"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "edge")
    ql3.run("local", "task", "add", "a", "--schedule", "* * * * * *", "--concurrency", "allow",
            "--", "sleep", "5")
    ql3.run("local", "task", "add", "b", "--schedule", "*/5 * * * * *", "--", "true")
    serve = ql3.start_serve()
    try:
        max_queued_a = 0
        deadline = time.monotonic() + WINDOW_S
        while time.monotonic() < deadline:
            a_runs = ql3.json("local", "runs", "--task", "a", "--limit", "100")
            max_queued_a = max(max_queued_a, sum(r["status"] == "queued" for r in a_runs))
            time.sleep(0.3)
        ql3.run("local", "task", "disable", "a")
        # B's last run, and A's, may still be queued or running: let them end (on the base
        # code A's pile never drains and the assertions below say what went wrong)
        wait_for(lambda: all(
            r["finished_at"] for r in ql3.json("local", "runs", "--limit", "200")), 30, 0.5)
        ql3.run("local", "task", "disable", "b")
        wait_for(lambda: all(
            r["finished_at"] for r in ql3.json("local", "runs", "--limit", "200")), 15, 0.5)
        runs = ql3.json("local", "runs", "--limit", "200")
        shown_a = ql3.json("local", "task", "show", "a")
        shown_b = ql3.json("local", "task", "show", "b")
        told_a = ql3.run("local", "task", "show", "a").stdout
    finally:
        assert ql3.stop_serve(serve) == 0
    print(f"C16: max queued A {max_queued_a}, max alive {_max_alive(runs)}, B runs "
          f"{[r['status'] for r in runs if r['task'] == 'b']}, A events {_slot_events(shown_a)},"
          f" B events {_slot_events(shown_b)}")

    b_runs = [r for r in runs if r["task"] == "b"]
    b_events = _slot_events(shown_b)
    # B started each of its slots: every run it got ran, none was skipped, and a slot that
    # found its queued run waiting joined that run
    assert all(r["status"] == "succeeded" for r in b_runs), b_runs
    assert [e for e in b_events if e[0] == "slot_skipped"] == []
    succeeded = {r["id"] for r in b_runs}
    joined = [d for kind, d in b_events if kind == "slot_coalesced"]
    assert all(d["run_id"] in succeeded for d in joined)
    assert len(b_runs) + sum(d["count"] for d in joined) >= WINDOW_S // 5 - 1, b_runs
    # A's backlog stayed bounded and its extra slots are on record
    assert max_queued_a <= 1
    a_events = _slot_events(shown_a)
    assert a_events and {(k, d["reason"]) for k, d in a_events} == {
        ("slot_skipped", "backlog_full")}
    assert sum(d["count"] for _, d in a_events) >= 5
    assert "): backlog_full" in told_a  # `task show` says why those slots did not run
    # the edge cap: never more than two attempts alive at once
    assert _max_alive(runs) <= 2


def test_run_of_a_forbid_task_whose_run_waits_at_the_cap_answers_that_waiting_run(
    tmp_path: Path,
) -> None:
    data = tmp_path / "edge"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "edge")
    ql3.run("local", "task", "add", "busy", "--schedule", "@once", "--concurrency", "allow",
            "--", "sleep", "30")
    ql3.run("local", "task", "add", "f", "--schedule", "@once", "--", "true")
    serve = ql3.start_serve()
    try:
        busy = [ql3.json("local", "run", "busy")["id"] for _ in range(2)]
        assert wait_for(lambda: all(
            ql3.json("local", "inspect", run_id)["status"] == "running" for run_id in busy), 15)
        first = ql3.json("local", "run", "f")
        again = ql3.json("local", "run", "f")  # the cap is full: the first has not started
        for run_id in busy:
            ql3.run("local", "cancel", run_id)
        done = wait_for(lambda: ql3.json("local", "inspect", first["id"])["finished_at"], 20)
        runs_f = ql3.json("local", "runs", "--task", "f")
    finally:
        assert ql3.stop_serve(serve) == 0
    assert first["status"] == "queued"
    assert again["id"] == first["id"]
    assert done and [r["status"] for r in runs_f] == ["succeeded"]
