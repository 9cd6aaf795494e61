"""Fresh-eyes review of the local profile (issue 12) through the real `ql3`: what a new user
met on a day of chores — Python reprs in text output, an unnamed missing command, ``pending``
next fire times of manual tasks, a secret typed on argv echoed back."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from harness import QL3, Ql3, wait_for

pytestmark = pytest.mark.integration

REPRS = re.compile(r"\b(True|False|None)\b")


def test_an_edit_event_reads_for_people_not_as_python_values(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "job", "--schedule", "@once", "--timeout", "600",
            "--", "true")
    ql3.run("local", "task", "edit", "job", "--timeout", "none")
    ql3.run("local", "task", "edit", "job", "--timeout", "65")
    shown = ql3.run("local", "task", "show", "job").stdout
    edits = [line for line in shown.splitlines() if "edited:" in line]
    assert len(edits) == 2, shown
    assert not REPRS.search(shown), shown
    assert "600.0" not in shown, shown
    assert "timeout_s 10m 00s -> -" in edits[1], shown
    assert "timeout_s - -> 1m 05s" in edits[0], shown


def test_notify_test_and_serve_log_read_yes_no_not_python_booleans(
    ql3: Ql3, tmp_path: Path
) -> None:
    ql3.run("local", "settings", "set", "notify_command", "false")
    test = ql3.run("local", "notify", "test", check=False)
    assert test.returncode == 1, test
    assert test.stdout.startswith("command: FAILED"), test.stdout
    assert not REPRS.search(test.stdout), test.stdout
    assert "duration_ms" not in test.stdout, test.stdout

    ql3.run("local", "task", "add", "boom", "--schedule", "@once", "--", "false")
    serve = ql3.start_serve()
    try:
        run_id = ql3.json("local", "run", "boom")["id"]
        wait_for(lambda: "notify_failed" in ql3.serve_log(), timeout=30)
    finally:
        Ql3.stop_serve(serve)
    lines = [line for line in ql3.serve_log().splitlines() if "notify_failed " in line]
    assert lines and run_id in lines[0], ql3.serve_log()
    assert not any(REPRS.search(line) for line in lines), lines
    assert not any("duration_ms" in line for line in lines), lines


def test_a_missing_or_unexecutable_command_is_named_in_the_error(
    ql3: Ql3, tmp_path: Path
) -> None:
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    cases = {"gone": ("/no/such/backup.sh", 127, "No such file or directory"),
             "bare": ("no-such-command-xyz", 127, "not found in PATH"),
             "noexec": (str(script), 126, "Permission denied")}
    for name, (command, code, why) in cases.items():
        ql3.run("local", "task", "add", name, "--schedule", "@once", "--no-check", "--", command)
        run = ql3.run("local", "run", name, check=False)
        assert run.returncode == 1, run
        assert f"cannot execute '{command}'" in run.stdout + run.stderr, run
        assert why in run.stdout + run.stderr, run
        log = ql3.run("local", "logs", f"{name}@last").stdout
        assert f"cannot execute '{command}'" in log and why in log, log
        assert ql3.json("local", "inspect", f"{name}@last")["exit_code"] == code


def test_a_manual_task_has_no_pending_next_fire_time(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "once", "--schedule", "@once", "--", "true")
    ql3.run("local", "task", "add", "boot", "--schedule", "@boot", "--", "true")
    ql3.run("local", "task", "add", "cron", "--schedule", "0 3 * * *", "--", "true")
    table = ql3.run("local", "task", "list").stdout.splitlines()
    by_name = {line.split()[0]: line for line in table[1:]}
    assert "pending" in by_name["cron"], table
    assert "pending" not in by_name["once"] and "pending" not in by_name["boot"], table
    shown = ql3.run("local", "task", "show", "once").stdout
    assert "pending" not in shown, shown


def test_a_variable_value_given_on_the_command_line_is_refused_without_echoing_it(
    ql3: Ql3,
) -> None:
    proc = subprocess.run([QL3, "local", "vars", "set", "TOKEN", "hunter2-s3cr3t"],
                          env=ql3.env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 2, proc
    assert "hunter2-s3cr3t" not in proc.stdout + proc.stderr, proc.stderr
    assert "stdin" in proc.stderr and "--from-file" in proc.stderr, proc.stderr
    assert "TOKEN" not in ql3.run("local", "vars", "list").stdout


def test_an_empty_secret_on_stdin_is_refused_and_nothing_is_stored(ql3: Ql3) -> None:
    """`< /dev/null` (or a command that printed nothing) gives no value: refused, exit 2,
    for a variable and for a task's secret alike; nothing is stored."""
    for argv in (["vars", "set", "TOKEN"],
                 ["task", "add", "sec", "--schedule", "@once", "--secret-env", "API_KEY",
                  "--", "true"]):
        proc = subprocess.run([QL3, "local", *argv], env=ql3.env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL, check=False)
        assert proc.returncode == 2, proc
        assert "the value is empty" in proc.stderr, proc.stderr
    assert "TOKEN" not in ql3.run("local", "vars", "list").stdout
    assert "sec" not in ql3.run("local", "task", "list").stdout.split()


def test_an_uninitialised_data_directory_is_named(ql3: Ql3, tmp_path: Path) -> None:
    typo = tmp_path / "ql3-dta"
    for args in (("status",), ("task", "list"), ("runs",)):
        proc = ql3.run("local", *args, "--data-dir", str(typo), check=False)
        assert proc.returncode != 0, proc
        assert str(typo) in proc.stderr, proc.stderr


def test_last_run_of_an_unknown_task_does_not_claim_the_task_exists(ql3: Ql3) -> None:
    proc = ql3.run("local", "logs", "nosuch@last", check=False)
    assert proc.returncode == 2, proc
    assert "no such run 'nosuch@last'" in proc.stderr, proc.stderr
    assert "the task has no runs" not in proc.stderr, proc.stderr


def test_a_foreground_run_names_itself_by_its_reference_within_80_columns(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "nightly-database-backup", "--schedule", "@once",
            "--", "true")
    ran = ql3.run("local", "run", "nightly-database-backup")
    first = ran.stderr.splitlines()[0]
    assert first == ("no `ql3 local serve` is running: running nightly-database-backup#1 "
                     "here (Ctrl-C cancels it)"), ran.stderr
    assert len(first) <= 80 + len("nightly-database-backup#1") - len("backup#1"), first
