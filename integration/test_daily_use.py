"""Issue 12 items 1, 2 and 10 through the real `ql3`: editing a task in place, seeing what
will happen, and messages a new user can act on — directly and through `serve`'s socket."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness import QL3, Ql3, wait_for

pytestmark = pytest.mark.integration


def _show(ql3: Ql3, name: str) -> dict[str, Any]:
    view: dict[str, Any] = ql3.json("local", "task", "show", name)
    return view


def _next_utc(hour: int, minute: int) -> str:
    now = dt.datetime.now(dt.UTC)
    at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if at <= now:
        at += dt.timedelta(days=1)
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


# -- item 1: edit ---------------------------------------------------------------------------


def test_edit_keeps_the_id_and_history_and_records_fields_but_never_env_values(
    ql3: Ql3,
) -> None:
    ql3.run("local", "task", "add", "backup", "--schedule", "@once", "--env", "TOKEN=hunter2",
            "--env", "MODE=fast", "--", "sh", "-c", 'echo "$MODE"')
    before = _show(ql3, "backup")
    ql3.run("local", "run", "backup")
    done = ql3.run("local", "task", "edit", "backup", "--env", "TOKEN=s3cr3t-new",
                   "--unset-env", "MODE", "--env", "MODE=full", "--timeout", "30",
                   "--max-attempts", "2", "--", "sh", "-c", 'echo "mode=$MODE"')
    assert "edited task backup: argv, env, timeout_s, max_attempts" in done.stdout
    after = _show(ql3, "backup")
    assert after["id"] == before["id"]
    assert (after["timeout_s"], after["max_attempts"]) == (30.0, 2)
    assert after["env"] == {"MODE": "full", "TOKEN": "s3cr3t-new"}
    assert after["argv"] == ["sh", "-c", 'echo "mode=$MODE"']
    assert len(after["recent_runs"]) == 1  # the run before the edit is still the task's
    edited = [e for e in after["events"] if e["kind"] == "task_edited"]
    assert len(edited) == 1
    detail = edited[0]["detail"]
    assert detail["changed"] == ["argv", "env", "timeout_s", "max_attempts"]
    assert detail["env_set"] == ["MODE", "TOKEN"]
    assert detail["timeout_s"] == {"from": None, "to": 30.0}
    shown = ql3.run("local", "task", "show", "backup").stdout
    assert "edited: " in shown and "timeout_s - -> 30s" in shown
    edit_lines = "".join(line for line in shown.splitlines() if "edited" in line)
    for secret in ("hunter2", "s3cr3t-new"):
        assert secret not in json.dumps(edited[0]["detail"], ensure_ascii=False)
        assert secret not in edit_lines
    ql3.run("local", "run", "backup")
    run_id = ql3.json("local", "runs", "--task", "backup")[0]["id"]
    assert ql3.run("local", "logs", run_id).stdout == "mode=full\n"  # the new definition


def test_edit_with_nothing_asked_or_a_bad_value_is_a_usage_error_and_changes_nothing(
    ql3: Ql3,
) -> None:
    ql3.run("local", "task", "add", "t", "--schedule", "0 3 * * *", "--", "true")
    result = None
    for args in ([], ["--schedule", "61 * * * *"], ["--timeout", "soon"],
                 ["--unset-env", "NOPE"], ["--cwd", "/definitely/not/here"]):
        result = ql3.run("local", "task", "edit", "t", *args, check=False)
        assert result.returncode == 2, (args, result.stderr)
    assert result is not None and "'/definitely/not/here'" in result.stderr
    assert not [e for e in _show(ql3, "t")["events"] if e["kind"] == "task_edited"]
    unchanged = ql3.run("local", "task", "edit", "t", "--schedule", "0 3 * * *")
    assert "task t unchanged" in unchanged.stdout


def test_bad_labels_and_a_variable_given_twice_are_refused_and_nothing_is_stored(
    ql3: Ql3,
) -> None:
    """Free-form labels follow shared/names.py's rule (1-128 characters, no control
    characters, at most 32; repeats kept once) and ``--env`` names a variable once: each
    refusal exits 2 naming the option, echoes no value, and stores no task."""
    base = ("local", "task", "add", "签到", "--schedule", "0 3 * * *")
    for extra in (["--label", ""], ["--label", "x" * 5000], ["--label", "a\tb"],
                  *([f"--label=l{i}" for i in range(33)],),
                  ["--env", "TOKEN=first-secret", "--env", "TOKEN=second-secret"]):
        result = ql3.run(*base, *extra, "--", "true", check=False)
        assert result.returncode == 2, (extra[:2], result.stdout, result.stderr)
        assert "secret" not in result.stderr and "xxxxxxxx" not in result.stderr
        assert ("labels" in result.stderr) or ("TOKEN is given twice" in result.stderr)
    assert ql3.json("local", "task", "list") == []
    assert ql3.run("local", "task", "list").stdout == (
        "no tasks yet: add one with `ql3 local task add NAME --schedule CRON -- COMMAND`\n")
    ql3.run(*base, "--label", "日常", "--label", "日常", "--label", "env=prod", "--", "true")
    assert _show(ql3, "签到")["labels"] == ["日常", "env=prod"]
    assert ql3.run("local", "task", "list", "--search", "京东").stdout == (
        "no task matches the filters (1 task in all)\n")


def test_a_command_quoted_as_one_word_is_refused_by_add_and_edit_unless_no_check(
    ql3: Ql3,
) -> None:
    """``-- 'echo hi there'`` is one word no program is named after: it could only fail at
    run time (exit 127), so ``task add`` and ``task edit`` refuse it (exit 2, naming the fix)
    unless ``--no-check``; separate words are fine."""
    bad = ql3.run("local", "task", "add", "问候", "--schedule", "0 3 * * *", "--",
                  "echo hi there", check=False)
    assert bad.returncode == 2 and "is not split" in bad.stderr, bad.stderr
    assert ql3.json("local", "task", "list") == []
    ql3.run("local", "task", "add", "问候", "--schedule", "0 3 * * *", "--", "echo", "hi")
    edit = ql3.run("local", "task", "edit", "问候", "--", "echo <b>hi</b>", check=False)
    assert edit.returncode == 2 and "run it through sh -c" in edit.stderr, edit.stderr
    assert _show(ql3, "问候")["argv"] == ["echo", "hi"]
    ql3.run("local", "task", "edit", "问候", "--no-check", "--", "echo <b>hi</b>")
    assert _show(ql3, "问候")["argv"] == ["echo <b>hi</b>"]


def test_edit_through_serve_reschedules_at_once_and_applies_to_the_next_run_only(
    ql3: Ql3, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    ql3.run("local", "task", "add", "job", "--schedule", "0 3 * * *", "--", "sh", "-c",
            f"echo old; while [ ! -e {gate} ]; do sleep 0.1; done")
    serve = ql3.start_serve()
    try:
        assert wait_for(lambda: _show(ql3, "job")["next_fire"] == _next_utc(3, 0), 10)
        first = ql3.json("local", "run", "job")["id"]
        assert wait_for(lambda: ql3.json("local", "inspect", first)["status"] == "running", 10)
        edit = ql3.run("local", "task", "edit", "job", "--schedule", "30 2 * * *", "--", "sh",
                       "-c", "echo new")
        assert "the change applies to the next run" in edit.stdout  # allowed while active
        assert wait_for(lambda: _show(ql3, "job")["next_fire"] == _next_utc(2, 30), 10)
        gate.touch()
        assert wait_for(
            lambda: ql3.json("local", "inspect", first)["status"] == "succeeded", 15)
        assert ql3.run("local", "logs", first).stdout.startswith("old")
        second = ql3.json("local", "run", "job", "--wait")["id"]
        assert ql3.run("local", "logs", second).stdout == "new\n"
        listed = ql3.run("local", "task", "list").stdout
        assert "30 2 * * *" in listed and "succeeded" in listed
    finally:
        assert ql3.stop_serve(serve) == 0


def test_runs_of_a_removed_and_re_added_task_stay_under_its_name(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "nightly", "--schedule", "@once", "--", "echo", "one")
    ql3.run("local", "run", "nightly")
    ql3.run("local", "task", "rm", "nightly")
    assert len(ql3.json("local", "runs", "--task", "nightly")) == 1  # removed: still there
    ql3.run("local", "task", "add", "nightly", "--schedule", "@once", "--", "echo", "two")
    ql3.run("local", "run", "nightly")
    runs = ql3.json("local", "runs", "--task", "nightly")
    assert [r["task"] for r in runs] == ["nightly", "nightly"]
    assert len({r["task_id"] for r in runs}) == 2


# -- item 2: what will happen -------------------------------------------------------------


def test_task_next_lists_slots_in_the_task_zone_and_the_viewer_zone(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "berlin", "--schedule", "0 9 * * *", "--timezone",
            "Europe/Berlin", "--", "true")
    env = dict(ql3.env, TZ="Asia/Shanghai")
    out = subprocess.run([QL3, "local", "task", "next", "berlin", "-n", "3"], env=env,
                         capture_output=True, text=True, check=True,
                         timeout=60).stdout.splitlines()
    assert out[0] == "next slots of berlin (0 9 * * *, Europe/Berlin)"
    assert len(out) == 4
    for line in out[1:]:  # 09:00 in Berlin is 16:00 (winter) or 15:00 (summer) in Shanghai
        assert " 09:00:00 +0" in line and "(here: " in line and "+08:00)" in line
        assert " 16:00:00 " in line or " 15:00:00 " in line
    slots = ql3.json("local", "task", "next", "berlin")["slots"]
    assert len(slots) == 5 and slots == sorted(slots)
    ql3.run("local", "task", "add", "boot", "--schedule", "@boot", "--", "true")
    assert "none: @boot" in ql3.run("local", "task", "next", "boot").stdout


def test_task_list_and_show_give_the_last_run_with_its_finish_and_duration(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "nap", "--schedule", "@once", "--", "sleep", "1.2")
    assert "never ran" in ql3.run("local", "task", "show", "nap").stdout
    ql3.run("local", "run", "nap")
    last = ql3.json("local", "task", "list")[0]["last_run"]
    assert last["status"] == "succeeded" and last["finished_at"]
    assert 1.0 <= last["duration_s"] < 10
    shown = ql3.run("local", "task", "show", "nap").stdout
    assert "last_run: succeeded, finished " in shown and ", took 1s" in shown
    assert "recent runs:" in shown and "nap#1 " in shown  # the runs table, as `runs` shows it
    assert "recent events:" in shown and "task created" in shown
    ql3.env["COLUMNS"] = "80"
    listed = ql3.run("local", "task", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "SCHEDULE", "NEXT", "LAST", "RUN", "COMMAND"]
    assert listed[1].split()[:2] == ["nap", "@once"] and "  succeeded 1s  sleep 1.2" in listed[1]


def test_a_long_task_name_keeps_its_whole_run_reference_at_80_columns(ql3: Ql3) -> None:
    """The reference is what people copy into `logs`: the short id gives way, not it."""
    name = "backup-database-nightly"  # 25 columns with "#1": they fit beside the rest
    ql3.env["COLUMNS"] = "80"
    ql3.run("local", "task", "add", name, "--schedule", "@once", "--", "true")
    ql3.run("local", "run", name)
    lines = ql3.run("local", "runs").stdout.splitlines()
    assert lines[0].split() == ["RUN", "STATUS", "EXIT", "STARTED", "DURATION"]
    assert lines[1].startswith(f"{name}#1  succeeded") and all(len(x) <= 80 for x in lines)
    assert ql3.run("local", "logs", f"{name}#1").returncode == 0


# -- item 10: messages and exit codes ------------------------------------------------------


@pytest.mark.parametrize("through_serve", [False, True])
def test_an_unknown_task_or_run_exits_2_naming_what_was_asked(
    ql3: Ql3, through_serve: bool
) -> None:
    serve = ql3.start_serve() if through_serve else None
    try:
        for args in (["task", "show", "ghost"], ["task", "edit", "ghost", "--timeout", "5"],
                     ["task", "next", "ghost"], ["run", "ghost"], ["runs", "--task", "ghost"]):
            result = ql3.run("local", *args, check=False)
            assert result.returncode == 2, (args, result.stderr)
            assert "no such task 'ghost'" in result.stderr
        missing = "01a2304d-a253-73ae-bb06-e8523ec37d27"
        result = ql3.run("local", "inspect", missing, check=False)
        assert result.returncode == 2 and f"no such run '{missing}'" in result.stderr
    finally:
        if serve is not None:
            assert ql3.stop_serve(serve) == 0


def test_a_script_without_a_shebang_runs_through_bin_sh_as_cron_does(
    ql3: Ql3, tmp_path: Path
) -> None:
    script = tmp_path / "plain.sh"
    script.write_text('echo "sh ran $0 with $1"\n')
    script.chmod(0o755)
    ql3.run("local", "task", "add", "plain", "--schedule", "@once", "--", str(script), "x")
    run = ql3.json("local", "run", "plain")
    assert run["status"] == "succeeded"
    assert ql3.run("local", "logs", run["id"]).stdout == f"sh ran {script} with x\n"


def test_a_deleted_cwd_is_named_in_the_error_and_in_logs(ql3: Ql3, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    ql3.run("local", "task", "add", "w", "--schedule", "@once", "--cwd", str(work), "--", "pwd")
    work.rmdir()
    result = ql3.run("local", "run", "w", check=False)
    assert result.returncode == 1
    assert f"'{work}'" in result.stderr.splitlines()[-1]
    run_id = ql3.json("local", "runs", "--task", "w")[0]["id"]
    log = ql3.run("local", "logs", run_id)
    assert f"did not start: cwd: the working directory '{work}'" in log.stdout


def test_an_os_error_names_the_path_instead_of_output_failed(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    result = subprocess.run([QL3, "local", "init", "--data-dir", str(not_a_dir / "d")],
                            capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 1
    assert "output failed" not in result.stderr  # was: "output failed: Not a directory"
    assert str(not_a_dir / "d") in result.stderr and "Not a directory" in result.stderr


def test_init_refuses_to_switch_profiles_silently(tmp_path: Path) -> None:
    ql3 = Ql3(tmp_path / "d")
    assert "profile edge" in ql3.run("local", "init", "--profile", "edge").stdout
    assert "profile edge" in ql3.run("local", "init").stdout  # re-init keeps it
    refused = ql3.run("local", "init", "--profile", "standalone", check=False)
    assert refused.returncode == 2 and "--change-profile" in refused.stderr
    assert "profile: edge" in ql3.run("local", "status").stdout
    switched = ql3.run("local", "init", "--profile", "standalone", "--change-profile")
    assert "changed from edge to standalone" in switched.stdout
    assert "profile: standalone" in ql3.run("local", "status").stdout


def test_status_names_the_profile_data_dir_owner_and_counts(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "a", "--schedule", "@once", "--", "true")
    ql3.run("local", "task", "add", "b", "--schedule", "@once", "--", "sleep", "30")
    ql3.run("local", "task", "disable", "a")
    idle = ql3.run("local", "status").stdout
    # the path whole: behind its label, or on its own line under it when that is too wide
    assert re.search(rf"data dir:\s+{re.escape(str(ql3.data_dir))}\n", idle), idle
    assert "profile: standalone" in idle
    assert "owner: none" in idle and "tasks: 2 (1 enabled)" in idle
    serve = ql3.start_serve()
    try:
        run_id = ql3.json("local", "run", "b")["id"]
        assert wait_for(lambda: ql3.json("local", "inspect", run_id)["status"] == "running", 10)
        busy = ql3.run("local", "status").stdout
        assert f"owner: serve (pid {serve.pid})" in busy and "active runs: 1" in busy
        ql3.run("local", "cancel", run_id)
    finally:
        assert ql3.stop_serve(serve) == 0
    fg = subprocess.Popen([QL3, "local", "run", "b"], env=ql3.env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        seen = wait_for(lambda: "a foreground run" in ql3.run("local", "status").stdout, 10)
        assert seen, ql3.run("local", "status").stdout
    finally:
        fg.terminate()
        fg.wait(30)
