"""Runs named the way people name them, in tables that fit, at times people read (issue 12
items 3 and 4), all through the real `ql3`: `backup#2`, `backup@last`, a 6-hex id suffix
(never a prefix), 80-column tables, the viewer's zone with its offset or `--utc`."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import uuid
from pathlib import Path

from harness import Ql3, wait_for
from qinglong.local.storage.migrations import default_migrations_dir, open_database

COUNTER = "n=$(cat {f} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {f}; echo output $n"
EPOCH_MS = re.compile(r"\b1\d{12}\b")
LOCAL_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d\d:\d\d")


def _three_backup_runs(ql3: Ql3, tmp_path: Path) -> list[dict[str, object]]:
    script = COUNTER.format(f=tmp_path / "counter")
    ql3.run("local", "task", "add", "backup", "--schedule", "@once", "--", "sh", "-c", script)
    for _ in range(3):
        ql3.run("local", "run", "backup")
    runs: list[dict[str, object]] = ql3.json("local", "runs", "--task", "backup")
    return sorted(runs, key=lambda r: str(r["id"]))


def _logs(ql3: Ql3, ref: str) -> str:
    return ql3.run("local", "logs", ref).stdout


def test_logs_inspect_and_cancel_take_task_number_last_and_an_id_suffix(
    ql3: Ql3, tmp_path: Path
) -> None:
    runs = _three_backup_runs(ql3, tmp_path)
    assert [r["number"] for r in runs] == [1, 2, 3]
    assert _logs(ql3, "backup#2") == "output 2\n"
    assert _logs(ql3, "backup@last") == "output 3\n"
    first_id = str(runs[0]["id"])
    assert _logs(ql3, first_id[-6:]) == "output 1\n"  # the last 6 hex digits
    assert _logs(ql3, first_id[-17:]) == "output 1\n"  # a suffix across a dash
    assert _logs(ql3, first_id) == "output 1\n"
    assert "run backup#2 " in ql3.run("local", "inspect", "backup#2").stdout
    cancelled = ql3.run("local", "cancel", "backup#1", check=False)  # finished: refused
    assert cancelled.returncode == 1 and "already finished" in cancelled.stderr


def test_a_prefix_an_unknown_number_and_a_short_suffix_exit_2_naming_what_was_asked(
    ql3: Ql3, tmp_path: Path
) -> None:
    runs = _three_backup_runs(ql3, tmp_path)
    prefix = str(runs[0]["id"])[:8]  # a timestamp, shared by every run of the minute
    for ref, said in ((prefix, f"no such run '{prefix}'"),
                      ("backup#99", "no such run 'backup#99'"),
                      ("nosuch@last", "no such run 'nosuch@last'"),
                      (str(runs[0]["id"])[-5:], "at least 6 hex digits")):
        for command in ("logs", "inspect", "cancel"):
            done = ql3.run("local", command, ref, check=False)
            assert done.returncode == 2, (command, ref, done.stderr)
            assert said in done.stderr and done.stdout == ""


def test_an_ambiguous_id_suffix_exits_2_and_a_longer_one_decides(
    ql3: Ql3, tmp_path: Path
) -> None:
    runs = _three_backup_runs(ql3, tmp_path)
    real = str(runs[0]["id"])
    # same time and counter, the same variant, another rest of the 4th group, same last 12
    twin = real[:20] + ("000" if real[20:23] != "000" else "111") + real[23:]
    assert uuid.UUID(twin).version == 7 and twin != real
    with sqlite3.connect(ql3.data_dir / "ql3.db") as conn:  # no owner runs meanwhile
        conn.execute(
            "INSERT INTO runs (id, task_id, trigger, status, not_before_ms, created_at_ms,"
            " updated_at_ms, number) SELECT ?, task_id, 'manual', 'cancelled', not_before_ms,"
            " created_at_ms, updated_at_ms, 99 FROM runs WHERE id = ?", (twin, real))
    done = ql3.run("local", "logs", real[-8:], check=False)
    assert done.returncode == 2 and f"run '{real[-8:]}' is ambiguous" in done.stderr
    assert _logs(ql3, real[-17:]) == "output 1\n"


def test_a_removed_and_re_added_task_keeps_its_old_runs_numbers_and_continues(
    ql3: Ql3, tmp_path: Path
) -> None:
    _three_backup_runs(ql3, tmp_path)
    ql3.run("local", "task", "rm", "backup")
    ql3.run("local", "task", "add", "backup", "--schedule", "@once", "--", "echo", "again")
    ql3.run("local", "run", "backup")
    assert _logs(ql3, "backup@last") == "again\n"
    assert _logs(ql3, "backup#4") == "again\n"
    assert _logs(ql3, "backup#2") == "output 2\n"  # the removed task's run, same name
    assert "backup#4" in ql3.run("local", "runs").stdout


def test_tables_fit_80_columns_and_honour_columns_when_piped_and_wide_shows_all(
    ql3: Ql3, tmp_path: Path
) -> None:
    name = "nightly-database-backup-of-the-accounting-server"
    ql3.run("local", "task", "add", name, "--schedule", "0 3 * * *", "--timezone",
            "Europe/Berlin", "--no-check", "--", "/usr/local/bin/backup.sh", "--exclude",
            "/var/cache with spaces", "--verbose", "--compress-with-the-slowest-level")
    ql3.run("local", "run", name, check=False)
    _three_backup_runs(ql3, tmp_path)
    for columns in (80, 60):
        ql3.env["COLUMNS"] = str(columns)
        for args in (("runs",), ("task", "list"), ("runs", "--status", "succeeded")):
            lines = ql3.run("local", *args).stdout.splitlines()
            assert lines and max(map(len, lines)) <= columns, (args, lines)
    ql3.env["COLUMNS"] = "80"
    wide = ql3.run("local", "task", "list", "--wide").stdout
    assert "'/var/cache with spaces'" in wide  # shell-quoted, whole
    full_id = ql3.json("local", "runs")[0]["id"]
    assert full_id in ql3.run("local", "runs", "--wide").stdout
    assert full_id not in ql3.run("local", "runs").stdout
    assert full_id[-8:] in ql3.run("local", "runs").stdout  # the short id
    succeeded = ql3.run("local", "runs", "--status", "succeeded").stdout
    assert "backup#3" in succeeded and name[:6] not in succeeded


def test_logs_tail_prints_the_last_lines(ql3: Ql3) -> None:
    ql3.run("local", "task", "add", "count", "--schedule", "@once", "--",
            "sh", "-c", "seq 1 500")
    ql3.run("local", "run", "count")
    assert ql3.run("local", "logs", "count@last", "--tail", "3").stdout == "498\n499\n500\n"
    assert ql3.run("local", "logs", "count#1", "--tail", "900").stdout.count("\n") == 500


def test_times_read_in_the_viewers_zone_with_offset_or_utc_and_json_stays_utc(
    ql3: Ql3, tmp_path: Path
) -> None:
    _three_backup_runs(ql3, tmp_path)
    ql3.env["TZ"] = "Asia/Shanghai"
    for args in (("runs",), ("inspect", "backup#1"), ("task", "show", "backup")):
        local = ql3.run("local", *args).stdout
        utc = ql3.run("local", *args, "--utc").stdout
        assert " +08:00" in local and " +00:00" not in local, args
        assert " +00:00" in utc and " +08:00" not in utc, args
    assert ql3.json("local", "runs")[0]["created_at"].endswith("Z")


def test_text_outputs_show_no_python_reprs_or_epoch_milliseconds(
    ql3: Ql3, tmp_path: Path
) -> None:
    _three_backup_runs(ql3, tmp_path)
    for args in (("task", "list"), ("task", "show", "backup"), ("runs",), ("runs", "--wide"),
                 ("inspect", "backup#1"), ("task", "list", "--wide")):
        text = ql3.run("local", *args).stdout
        for word in ("None", "True", "False"):
            assert not re.search(rf"\b{word}\b", text), (args, word, text)
        assert not EPOCH_MS.search(text), (args, text)


def test_serves_log_lines_carry_the_viewers_zone_and_references_work_through_it(
    ql3: Ql3,
) -> None:
    ql3.env["TZ"] = "Asia/Shanghai"
    ql3.run("local", "task", "add", "hello", "--schedule", "@once", "--", "echo", "hi")
    serve = ql3.start_serve()
    try:
        ql3.run("local", "run", "hello", "--wait")
        assert wait_for(lambda: " ql3 INFO " in ql3.serve_log(), 10)
        assert ql3.run("local", "logs", "hello@last").stdout == "hi\n"  # through serve
        unknown = ql3.run("local", "inspect", "hello#7", check=False)
        assert unknown.returncode == 2 and "no such run 'hello#7'" in unknown.stderr
    finally:
        Ql3.stop_serve(serve)
    logged = [line for line in ql3.serve_log().splitlines() if " ql3 INFO " in line]
    assert logged and all(re.match(LOCAL_STAMP.pattern + " ql3 INFO", line)
                          for line in logged), logged
    assert all(" +08:00 ql3" in line for line in logged)


def test_an_upgraded_database_numbers_its_runs_per_task_name_in_id_order(
    ql3: Ql3, tmp_path: Path
) -> None:
    """Migration 0005 on a database made before it: runs of a removed task and of its
    re-added namesake are numbered in id (creation) order under the name."""
    db_path = ql3.data_dir / "ql3.db"
    with sqlite3.connect(db_path) as conn:
        settings = conn.execute("SELECT key, value FROM settings").fetchall()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    old = tmp_path / "migrations-0004"
    old.mkdir()
    for path in sorted(default_migrations_dir().glob("000[1-4]-*.sql")):
        shutil.copy(path, old / path.name)
    open_database(str(db_path), old).close()
    ids = [str(uuid.UUID(int=(1_700_000_000_000 + i) << 80 | 0x7 << 76 | 0b10 << 62 | i))
           for i in range(5)]
    with sqlite3.connect(db_path) as conn:
        conn.executemany("INSERT INTO settings (key, value) VALUES (?, ?)", settings)
        for task_id, deleted in ((ids[0], 1), (ids[2], None)):
            conn.execute(
                "INSERT INTO tasks (id, name, argv_json, schedule, timezone, created_at_ms,"
                " updated_at_ms, deleted_at_ms) VALUES (?, 'backup', ?, '@once', 'UTC', 1, 1, ?)",
                (task_id, json.dumps(["true"]), deleted))
        for run_id, task_id in ((ids[1], ids[0]), (ids[3], ids[2]), (ids[4], ids[2])):
            conn.execute(
                "INSERT INTO runs (id, task_id, trigger, status, not_before_ms, created_at_ms,"
                " updated_at_ms) VALUES (?, ?, 'manual', 'cancelled', 1, 1, 1)",
                (run_id, task_id))
    numbered = {r["id"]: r["number"] for r in ql3.json("local", "runs")}
    assert numbered == {ids[1]: 1, ids[3]: 2, ids[4]: 3}
    assert ql3.json("local", "inspect", "backup#1")["id"] == ids[1]
    ql3.run("local", "run", "backup")
    assert ql3.json("local", "inspect", "backup@last")["number"] == 4
