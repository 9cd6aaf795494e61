"""What ``ql3 cluster task list``/``show`` and ``inspect`` print for people (issue 12 item
2, issue 13 item 2): the last run as ``ql3 local`` prints it (``qinglong.shared.display``),
tables within 80 columns, the worker by its name."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from qinglong.client import output
from qinglong.shared import display


@pytest.fixture
def shanghai(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The viewer is in Asia/Shanghai (UTC+8), at 80 columns, without ``--wide``/``--utc``."""
    monkeypatch.setenv("TZ", "Asia/Shanghai")
    monkeypatch.setenv("COLUMNS", "80")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
    display.DISPLAY.wide = display.DISPLAY.utc = False


def a_task(name: str, last_run: dict[str, Any] | None, **over: Any) -> dict[str, Any]:
    task = {"name": name, "schedule": "*/5 * * * *", "timezone": "Asia/Shanghai",
            "enabled": True, "concurrency_policy": "forbid", "max_attempts": 1,
            "next_fire_at": "2026-12-02T01:30:00Z", "labels": {},
            "argv": ["/usr/bin/python3", "/srv/jobs/nightly-report.py", "--all", "--verbose"],
            "shell": None, "bundle_digest": None, "entry_point": None, "last_run": last_run}
    task.update(over)
    return task


DONE = {"id": "0190", "number": 3, "status": "succeeded",
        "finished_at": "2026-12-01T19:00:05Z", "duration_s": 65.4}


def test_shared_last_run_texts_are_status_duration_and_finish_time(shanghai: None) -> None:
    assert display.last_run_short(DONE) == "succeeded 1m 05s"
    assert display.last_run_short({**DONE, "status": "queued", "duration_s": None}) == "queued"
    assert display.last_run_short(None) == ""
    assert display.last_run_wide(DONE) == "succeeded 2026-12-02 03:00:05 +08:00 (1m 05s)"
    assert display.describe_last_run(DONE) == (
        "succeeded, finished 2026-12-02 03:00:05 +08:00, took 1m 05s")
    running = {**DONE, "status": "running", "finished_at": None, "duration_s": 12}
    assert display.describe_last_run(running) == "running, took 12s"
    assert display.describe_last_run(None) == "never ran"


def test_task_list_at_80_columns_keeps_next_and_last_run_whole_and_cuts_the_command(
        shanghai: None, capsys: pytest.CaptureFixture[str]) -> None:
    output.print_tasks([a_task("nightly-report", DONE), a_task("fresh", None),
                        a_task("off", {**DONE, "status": "failed"}, enabled=False)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["NAME", "SCHEDULE", "NEXT", "LAST", "RUN", "COMMAND"]
    assert all(len(line) <= 80 for line in lines), lines
    assert "2026-12-02 09:30:00 +08:00" in lines[1] and "succeeded 1m 05s" in lines[1]
    assert "…" in lines[1]  # the command gave way
    assert "succeeded" not in lines[2] and "failed 1m 05s" in lines[3]
    assert "disabled" in lines[3]


def test_task_list_wide_adds_the_last_run_s_finish_time(
        shanghai: None, capsys: pytest.CaptureFixture[str]) -> None:
    display.DISPLAY.wide = True
    output.print_tasks([a_task("nightly-report", DONE)])
    out = capsys.readouterr().out
    assert "succeeded 2026-12-02 03:00:05 +08:00 (1m 05s)" in out
    assert "/srv/jobs/nightly-report.py --all --verbose" in out


def test_inspect_names_the_worker_and_wide_adds_its_incarnation(
        shanghai: None, capsys: pytest.CaptureFixture[str]) -> None:
    incarnation = "0190a000-0000-7000-8000-0000c0ffee42"
    attempts = [{"number": 1, "status": "succeeded", "exit_code": 0, "signal": None,
                 "started_at": "2026-12-01T19:00:00Z", "finished_at": "2026-12-01T19:00:05Z",
                 "worker_incarnation_id": incarnation, "worker_name": "w1", "reason": None},
                {"number": 2, "status": "lost", "exit_code": None, "signal": None,
                 "started_at": None, "finished_at": None,
                 "worker_incarnation_id": incarnation, "reason": "lease_expired"}]
    output.print_attempts(attempts)
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows[0].split()[-2:] == ["w1", "-"]
    assert rows[1].split()[-2] == "c0ffee42"  # an answer without a name: the short id
    display.DISPLAY.wide = True
    output.print_attempts(attempts[:1])
    assert incarnation in capsys.readouterr().out
    assert os.environ["COLUMNS"] == "80"


def a_run(task: str, number: int) -> dict[str, Any]:
    return {"id": "01a2333f-0000-7000-8000-00000000c0de", "task_name": task, "number": number,
            "status": "succeeded", "exit_code": 0, "attempt_count": 1, "trigger": "manual",
            "created_at": "2026-12-01T19:00:00Z", "started_at": "2026-12-01T19:00:00Z",
            "finished_at": "2026-12-01T19:01:05Z"}


def test_runs_at_80_columns_cut_a_long_reference_in_its_task_name_and_keep_its_number(
        shanghai: None, capsys: pytest.CaptureFixture[str]) -> None:
    output.print_runs([a_run("jd-daily-sign-in-backup", 4), a_run("backup", 12)])
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    first = lines[1].split()[0]
    assert first.endswith("…#4") and first.startswith("jd-daily-s"), lines
    assert lines[2].split()[0] == "backup#12"
    assert display.shorten_ref("jd-daily-sign-in-backup#4", 13) == "jd-daily-s…#4"
    assert display.shorten_ref("no reference at all", 8) == "no refe…"


def test_local_runs_keep_the_number_of_a_long_reference_too(
        shanghai: None, capsys: pytest.CaptureFixture[str]) -> None:
    from qinglong.local.app import output as local_output

    run = {"id": "01a2333f-0000-7000-8000-00000000c0de", "task": "jd-daily-sign-in-backup-full",
           "number": 12, "status": "succeeded", "exit_code": 0, "signal": None,
           "trigger": "manual", "created_at": "2026-12-01T19:00:00Z",
           "finished_at": "2026-12-01T19:01:05Z",
           "attempts": [{"started_at": "2026-12-01T19:00:00Z"}]}
    local_output.print_runs([run])
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[1].split()[0].endswith("…#12"), lines


def test_task_list_gives_the_command_its_share_of_what_the_fixed_columns_leave(
        shanghai: None, capsys: pytest.CaptureFixture[str]) -> None:
    output.print_tasks([a_task("backup", DONE, argv=["/bin/echo", "hi"],
                               schedule="*/5 * * * * *")])
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[1].endswith("  /bin/echo hi"), lines  # whole: the long schedule gave way
    output.print_tasks([a_task("jd-daily-sign-in-backup", DONE)])
    lines = capsys.readouterr().out.splitlines()
    command = lines[1].split("  ")[-1]
    assert all(len(line) <= 80 for line in lines), lines
    assert len(command) >= 10 and command.startswith("/usr/bin/"), lines


def test_occurrences_at_80_columns_keep_the_outcome_and_both_slot_times_whole(
        shanghai: None, capsys: pytest.CaptureFixture[str]) -> None:
    items = [{"outcome": outcome, "first_slot": "2026-12-01T19:00:00Z",
              "last_slot": "2026-12-01T19:58:00Z", "slot_count": count, "run_id": run}
             for outcome, count, run in (
                 ("skipped_downtime", 30, None), ("skipped_active", 2, None),
                 ("run_created", 1, "01a2333f-0000-7000-8000-00000000c0de"))]
    output.print_occurrences(items)
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0].split() == ["OUTCOME", "FIRST", "SLOT", "(+08:00)", "LAST", "SLOT",
                                "(+08:00)", "SLOTS", "RUN"]
    assert lines[1].split() == ["skipped_downtime", "2026-12-02", "03:00:00", "2026-12-02",
                                "03:58:00", "30"]
    assert lines[2].split()[0] == "skipped_active" and "03:58:00" in lines[2]
    assert lines[3].split() == ["run_created", "2026-12-02", "03:00:00", "1", "0000c0de"]
    display.DISPLAY.wide = True  # room enough: every time with its offset
    output.print_occurrences(items)
    assert "2026-12-02 03:58:00 +08:00" in capsys.readouterr().out



def test_a_protected_column_stays_whole_while_the_others_give_way() -> None:
    """``fit_table``'s ``protect``: once the flexible columns are at their floor, the next
    fire time stays whole and a long name or schedule is cut instead (``task list`` at 80
    columns with a LABELS column and a 120-character name)."""
    from qinglong.shared.display import fit_table, text_width

    columns = ["name", "schedule", "next (+00:00)", "last run", "command", "labels"]
    rows = [["长" * 120, "0 8 * * * (Asia/Shanghai)", "2026-12-03 00:00:00", "succeeded 1s",
             "/bin/echo hi", "日常"]]
    kept = fit_table(columns, rows, width=80, flexible=("labels", "command"), share=True,
                     protect=("next (+00:00)", "last run"), wide=False)
    assert "2026-12-03 00:00:00" in kept[1] and "succeeded 1s" in kept[1], kept
    assert all(text_width(line) <= 80 for line in kept)
    cut = fit_table(columns, rows, width=80, flexible=("labels", "command"), share=True,
                    wide=False)
    assert "2026-12-03 00:00:00" not in cut[1], cut  # without it the time was cut
