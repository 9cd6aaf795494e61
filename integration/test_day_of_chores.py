"""Issue 12, "Done when": one scripted session of a day's chores on an 80-column terminal.

A user in Shanghai (TZ=Asia/Shanghai, COLUMNS=80) keeps a few cron jobs with the real `ql3`:
sets a secret, adds a task that uses it, edits the task, checks its next slots, runs it in the
foreground and through `serve` while watching the output arrive, cancels a long task by
``TASK@last``, reads its last log, gets a push when a task fails, and looks at runs, the task
and the status. Only the text a person reads is parsed: the session never passes ``--json``,
never opens the database, and never types a full run id (runs are named ``task#N``,
``task@last`` or by the short id a table shows).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from harness import QL3, Ql3, alive_in_group, wait_for
from qinglong.shared.display import text_width

pytestmark = pytest.mark.integration

COLUMNS = 80
FULL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
REPR = re.compile(r"\b(None|True|False)\b")
LOCAL_TIME = re.compile(r"\b20\d\d-\d\d-\d\d \d\d:\d\d:\d\d ([+-]\d\d:\d\d)")
RUN_ROW = re.compile(r"^(?P<ref>\S+#\d+)\s+(?P<short>[0-9a-f]{8})\s+(?P<status>\w+)\s+"
                     r"(?P<exit>sig \d+|-|\d+)\s")
TOKEN = "tok-Hq73-SECRET"    # the push token, a global variable
API_KEY = "key-Lp05-SECRET"  # the failing task's own secret, typed on stdin


class Terminal:
    """The user's shell: every `ql3` command with COLUMNS=80 and TZ=Asia/Shanghai, checked
    for what a person must never see (Python reprs) and what this session never types."""

    def __init__(self, ql3: Ql3) -> None:
        ql3.env.update(COLUMNS=str(COLUMNS), TZ="Asia/Shanghai")  # `serve` runs here too
        self.env = dict(ql3.env)

    def _check_args(self, args: tuple[str, ...]) -> None:
        assert "--json" not in args and "--wide" not in args, args
        assert not any(FULL_UUID.search(a) for a in args), f"a full run id typed: {args}"

    def __call__(self, *args: str, stdin: str | None = None, code: int = 0,
                 table: bool = False) -> str:
        """``ql3 local ARGS``; its stdout (exit code ``code`` expected). ``table``: every
        line fits the terminal."""
        self._check_args(args)
        proc = subprocess.run([QL3, "local", *args], env=self.env, input=stdin,
                              capture_output=True, text=True, timeout=90, check=False)
        assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
        out = proc.stdout
        assert not REPR.search(out + proc.stderr), (args, out, proc.stderr)
        for line in out.splitlines():  # every time in the viewer's zone (`task next`
            offsets = LOCAL_TIME.findall(line)  # adds the task's zone beside it)
            assert not offsets or "+08:00" in offsets, (args, line)
            assert "+00:00" not in offsets and not re.search(r"\d\dZ\b", line), (args, line)
        if table:  # screen columns: 京 takes two
            too_wide = [line for line in out.splitlines() if text_width(line) > COLUMNS]
            assert not too_wide, (args, too_wide)
        return out

    def fails(self, *args: str, code: int = 2) -> str:
        """``ql3 local ARGS`` expected to fail with ``code``: its one stderr line."""
        self._check_args(args)
        proc = subprocess.run([QL3, "local", *args], env=self.env, capture_output=True,
                              text=True, timeout=90, check=False)
        assert proc.returncode == code, (args, proc.returncode, proc.stdout, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1, lines
        return lines[0]

    def start(self, *args: str) -> subprocess.Popen[str]:
        """A command left running in another terminal (its stdout readable line by line)."""
        self._check_args(args)
        return subprocess.Popen([QL3, "local", *args], env=self.env, text=True, bufsize=1,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _read_line(proc: subprocess.Popen[str], timeout: float = 15) -> str:
    """The next line ``proc`` prints, read while it keeps running."""
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line:
            return line
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"no line from {proc.args!r} (exit {proc.poll()})")


def _runs(out: str) -> list[dict[str, str]]:
    """The rows of a `runs` table, newest first (its header checked)."""
    lines = out.splitlines()
    assert lines[0].split() == ["RUN", "ID", "STATUS", "EXIT", "STARTED", "DURATION"], lines
    rows = []
    for line in lines[1:]:
        match = RUN_ROW.match(line)
        if match:
            rows.append(match.groupdict())
    return rows


def _field(out: str, key: str) -> str:
    """The value of ``key:`` in a `task show`, `status` or `settings show` listing; a long
    value stands on its own line under ``key:`` (whole, to be copied)."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        name, sep, rest = line.partition(": ")
        if sep and name.strip() == key:
            return rest
        if line.strip() == f"{key}:" and i + 1 < len(lines):
            return lines[i + 1].strip()
    raise AssertionError(f"no {key!r} in {out}")


def test_a_day_of_chores_on_an_80_column_terminal_without_json_sql_or_full_run_ids(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    ql3 = Ql3(data)
    sh = Terminal(ql3)
    gate = tmp_path / "gate"
    pgid_file = tmp_path / "pgid"
    pushed = tmp_path / "pushed.env"
    push = tmp_path / "push.sh"  # the user's own push script, as Qinglong users have
    push.write_text(f'#!/bin/sh\nenv > "{pushed}.tmp" && mv "{pushed}.tmp" "{pushed}"\n')
    push.chmod(0o755)

    # -- morning: a data directory, a secret, a task that uses it ------------------------
    assert "profile standalone" in sh("init", "--profile", "standalone")
    assert "PUSH_TOKEN" in sh("vars", "set", "PUSH_TOKEN", stdin=TOKEN)
    listed_vars = sh("vars", "list", table=True)
    assert "PUSH_TOKEN" in listed_vars and TOKEN not in listed_vars
    script = (f'echo "start mode=$MODE token=${{#PUSH}} chars"; '
              f'while [ ! -e {gate} ]; do sleep 0.1; done; echo "done mode=$MODE"')
    added = sh("task", "add", "backup", "--schedule", "0 3 * * *", "--timezone",
               "Europe/Berlin", "--env", "MODE=fast", "--secret-env", "PUSH=@PUSH_TOKEN",
               "--", "sh", "-c", script)
    assert "added task backup" in added

    # -- edit it: another hour, another mode; same task ----------------------------------
    edited = sh("task", "edit", "backup", "--schedule", "30 2 * * *", "--env", "MODE=full")
    assert "edited task backup: schedule, env" in edited
    shown = sh("task", "show", "backup")
    assert _field(shown, "schedule") == "30 2 * * *"
    assert "MODE=full" in _field(shown, "env")
    assert _field(shown, "secret_env") == "PUSH=@PUSH_TOKEN" and TOKEN not in shown
    assert "edited: schedule '0 3 * * *' -> '30 2 * * *'; env (set MODE)" in shown

    # -- check the next slots: 02:30 in Berlin is 09:30 (winter) or 08:30 (summer) here --
    slots = sh("task", "next", "backup", "-n", "3", table=True).splitlines()
    assert slots[0] == "next slots of backup (30 2 * * *, Europe/Berlin)"
    assert len(slots) == 4
    for line in slots[1:]:
        assert re.fullmatch(r"  \S+ 02:30:00 \+0[12]:00  \(here: \S+ 0[89]:30:00 \+08:00\)",
                            line), line
    first_slot_here = slots[1].split("(here: ")[1].rstrip(")")

    # -- run it by hand before serve is up: output shows as it is written ----------------
    fg = sh.start("run", "backup")
    try:
        assert _read_line(fg) == "start mode=full token=15 chars\n"  # the secret arrived
        assert fg.poll() is None  # ... while the run is still going
        gate.touch()
        out, err = fg.communicate(timeout=30)
    finally:
        if fg.poll() is None:
            fg.kill()
            fg.wait()
    assert fg.returncode == 0, err
    assert "done mode=full" in out and TOKEN not in out + err
    gate.unlink()

    # -- the notifier, then serve for the rest of the day ---------------------------------
    sh("settings", "set", "notify_command", str(push))
    settings = sh("settings", "show")
    assert str(push) in _field(settings, "notify_command")
    serve = ql3.start_serve()
    try:
        assert "owner: serve" in sh("status")

        # -- run it through serve and follow its log while it runs ------------------------
        queued = sh("run", "backup")
        assert re.match(r"run backup#2 \(", queued), queued
        follower = sh.start("logs", "-f", "backup@last")
        try:
            assert _read_line(follower) == "start mode=full token=15 chars\n"
            assert follower.poll() is None  # still following: the run waits for the gate
            running = _runs(sh("runs", "--task", "backup", table=True))
            assert (running[0]["ref"], running[0]["status"]) == ("backup#2", "running")
            gate.touch()
            rest, _ = follower.communicate(timeout=30)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        assert follower.returncode == 0 and rest == "done mode=full\n"
        assert wait_for(lambda: _runs(sh("runs", "--task", "backup"))[0]["status"]
                        == "succeeded", 15)

        # -- a long task started, then cancelled by TASK@last; its whole group is gone ----
        sh("task", "add", "reindex", "--schedule", "@once", "--", "sh", "-c",
           f"ps -o pgid= $$ > {pgid_file}; echo reindexing; sleep 300 & sleep 300")
        assert "run reindex#1 (" in sh("run", "reindex")
        assert wait_for(lambda: "reindexing" in sh("logs", "reindex@last"), 15)
        assert wait_for(pgid_file.exists, 5)
        pgid = int(pgid_file.read_text())
        assert alive_in_group(pgid)
        cancelled = sh("cancel", "reindex@last", "--wait")
        assert re.match(r"run reindex#1 \(.*\): cancelled", cancelled), cancelled
        assert not alive_in_group(pgid), "the cancelled task's group lives on"
        assert sh("logs", "reindex@last") == "reindexing\n"
        rows = _runs(sh("runs", "--task", "reindex", table=True))
        assert [(r["ref"], r["status"]) for r in rows] == [("reindex#1", "cancelled")]
        assert sh("logs", rows[0]["short"]) == "reindexing\n"  # the short id a table shows

        # -- a task that fails: the push script gets the run's facts, not its secret ------
        # a daily slot twelve hours away: `*/15` fired on its own once (sync#1 taken at 08:00)
        far_hour = (time.gmtime().tm_hour + 12) % 24
        sh("task", "add", "sync", "--schedule", f"0 {far_hour} * * *", "--timezone", "UTC",
           "--secret-env", "API_KEY",
           "--", "sh", "-c", 'echo "syncing with ${#API_KEY} chars"; exit 3', stdin=API_KEY)
        failed = sh("run", "sync", "--wait", code=1)
        assert re.match(r"run sync#1 \(.*\): failed \(exit 3\)", failed), failed
        assert wait_for(pushed.exists, 20), "the notifier was not called"
        facts = dict(line.split("=", 1) for line in pushed.read_text().splitlines()
                     if "=" in line)
        sync_rows = _runs(sh("runs", "--task", "sync", table=True))
        assert [(r["ref"], r["status"], r["exit"]) for r in sync_rows] == [
            ("sync#1", "failed", "3")]
        assert facts["QL3_TASK"] == "sync" and facts["QL3_STATUS"] == "failed"
        assert facts["QL3_EXIT_CODE"] == "3"
        assert facts["QL3_RUN_ID"].endswith(sync_rows[0]["short"])
        assert API_KEY not in pushed.read_text() and "API_KEY" not in facts
        assert facts["PUSH_TOKEN"] == TOKEN  # global variables are the push script's (README)
        assert sh("logs", "sync@last") == "syncing with 15 chars\n"

        # -- the end of the day: runs, the task, the status -------------------------------
        all_runs = _runs(sh("runs", table=True))
        assert [r["ref"] for r in all_runs] == ["sync#1", "reindex#1", "backup#2", "backup#1"]
        tasks = sh("task", "list", table=True)
        assert tasks.splitlines()[0].split()[:2] == ["NAME", "SCHEDULE"]
        backup_row = next(line for line in tasks.splitlines() if line.startswith("backup "))
        assert first_slot_here in backup_row and "succeeded" in backup_row
        sync_row = next(line for line in tasks.splitlines() if line.startswith("sync "))
        assert "failed" in sync_row
        show = sh("task", "show", "backup")
        assert _field(show, "next_fire") == first_slot_here
        assert re.fullmatch(r"succeeded, finished \S+ \S+ \+08:00, took \S+",
                            _field(show, "last_run")), show
        recent = show.split("recent runs:\n")[1].split("recent events:")[0].splitlines()
        assert [_runs("\n".join(line.strip() for line in recent))[i]["ref"]
                for i in (0, 1)] == ["backup#2", "backup#1"]
        assert max(map(len, recent)) <= COLUMNS, recent  # a table in a table: it fits too
        assert TOKEN not in show
        status = sh("status")
        assert _field(status, "owner").startswith(f"serve (pid {serve.pid})")
        assert _field(status, "tasks") == "3 (3 enabled)"
        assert _field(status, "active runs").startswith("0")
    finally:
        assert ql3.stop_serve(serve) == 0
    served = ql3.serve_log()
    assert TOKEN not in served and API_KEY not in served
    logged = [line for line in served.splitlines() if " ql3 INFO " in line]
    assert logged and all(re.match(r"20\S+ \S+ \+08:00 ql3 INFO ", line) for line in logged)
    assert "owner: none" in sh("status")


def test_a_qinglong_users_first_hour_with_chinese_names_zones_and_labels(
    tmp_path: Path,
) -> None:
    """A Qinglong user on a machine set to Asia/Shanghai adds 京东签到 without --timezone,
    sees it in Chinese (tables within 80 screen columns, JSON unescaped), lists it by label
    and by a search, sees a zone only where it differs from the machine's, runs it by name
    and reads its log by ``京东签到#1`` and ``京东签到@last``."""
    import json

    sh = Terminal(Ql3(tmp_path / "data"))
    sh("init", "--profile", "standalone")

    added = sh("task", "add", "京东签到", "--schedule", "0 8 * * *", "--label", "平台=京东",
               "--", "sh", "-c", "echo 签到成功")
    assert added.startswith("added task 京东签到 (")
    sh("task", "add", "每日 签到-2", "--schedule", "0 9 * * *", "--timezone", "Europe/Berlin",
       "--label", "平台=淘宝", "--", "sh", "-c", "echo 每日签到完成")
    sh("task", "add", "backup.daily", "--schedule", "30 2 * * *", "--", "true")
    sh("task", "add", "签到1", "--schedule", "@once", "--", "true")

    # the same name under NFKC case-folding (full-width digit) is a duplicate
    assert "already exists" in sh.fails("task", "add", "签到１", "--schedule", "@once",
                                        "--", "true", code=1)
    refused = sh.fails("task", "add", "京东/签到", "--schedule", "@once", "--", "true")
    assert "letters or digits of any language" in refused and "京东签到" in refused
    assert "did you mean Asia/Shanghai?" in sh.fails(
        "task", "add", "x", "--schedule", "@once", "--timezone", "asia/shanghai", "--", "true")
    assert "did you mean Asia/Shanghai?" in sh.fails(
        "task", "add", "x", "--schedule", "@once", "--timezone", "Asia/Beijing", "--", "true")

    # the machine's zone is the default, and shown only where a task differs from it
    shown = sh("task", "show", "京东签到", table=True)
    assert _field(shown, "timezone") == "Asia/Shanghai"
    assert _field(shown, "labels") == "平台=京东"
    listed = sh("task", "list", table=True).splitlines()
    assert listed[0].split() == ["NAME", "SCHEDULE", "NEXT", "LAST", "RUN", "COMMAND",
                                 "LABELS"]
    jd = next(line for line in listed if line.startswith("京东签到 "))
    berlin = next(line for line in listed if line.startswith("每日 签到-2 "))
    assert "0 8 * * *" in jd and "(" not in jd.split("0 8 * * *")[1].split()[0]
    assert "0 9 * * * (Europ" in berlin, berlin  # shortened to fit, never split
    assert "平台=京东" in jd

    def names(out: str) -> list[str]:
        return sorted(line.split("  ")[0] for line in out.splitlines()[1:])

    assert names(sh("task", "list", "--label", "平台=京东", table=True)) == ["京东签到"]
    assert names(sh("task", "list", "--search", "签到", table=True)) == [
        "京东签到", "每日 签到-2", "签到1"]
    assert names(sh("task", "list", "--search", "完成")) == ["每日 签到-2"]  # its command
    assert names(sh("task", "list", "--search", "BACKUP")) == ["backup.daily"]
    assert names(sh("task", "list", "--label", "平台=京东", "--search", "每日")) == []

    # Chinese output, run by name, its log by TASK#N and TASK@last
    ran = sh("run", "京东签到").splitlines()
    assert ran[0] == "签到成功" and ran[1].startswith("run 京东签到#1 ("), ran
    assert sh("logs", "京东签到#1") == "签到成功\n"
    assert sh("logs", "京东签到@last") == "签到成功\n"
    runs = _runs(sh("runs", "--task", "京东签到", table=True))
    assert [(r["ref"], r["status"]) for r in runs] == [("京东签到#1", "succeeded")]
    inspected = sh("inspect", "京东签到@last", table=True)
    assert inspected.startswith("run 京东签到#1 (")

    proc = subprocess.run([QL3, "local", "task", "list", "--json"], env=sh.env,
                          capture_output=True, text=True, timeout=60, check=True)
    assert '"name": "京东签到"' in proc.stdout and "\\u4eac" not in proc.stdout
    assert {t["name"] for t in json.loads(proc.stdout)} >= {"京东签到", "每日 签到-2"}
