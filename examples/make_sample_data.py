#!/usr/bin/env python3
"""Create a small demo tree for the other example scripts.

Usage: make_sample_data.py DIR

Creates, under DIR (made if missing; every file is created exclusively, so existing data is
never overwritten and a second run fails instead):

  DIR/logs/app.log            fresh log (mtime now)
  DIR/logs/worker.log         fresh log
  DIR/logs/app-old.log        mtime 30 days ago
  DIR/logs/worker-old.log     mtime 10 days ago
  DIR/logs/cron-old.log       mtime 45 days ago
  DIR/logs/notes.txt          mtime 60 days ago, not a *.log file
  DIR/logs/linked-old.log     symlink -> ../keep/precious.log (the link and its target are old)
  DIR/keep/precious.log       mtime 90 days ago, outside logs/: must never be touched
  DIR/db/app.sqlite           SQLite (WAL) with tables ``tasks`` (4 rows) and ``runs`` (40 rows)

Contents are deterministic. Prints what it made; exit 0, or 1 if something already exists.
Stdlib only.
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import time

DAY = 86400
LOGS = {  # name: (age in days, lines)
    "app.log": (0, 200),
    "worker.log": (0, 120),
    "app-old.log": (30, 400),
    "worker-old.log": (10, 300),
    "cron-old.log": (45, 50),
}
TASKS = [
    (1, "compress logs", "0 3 * * *", "python3 compress_old_logs.py /var/log/app 7"),
    (2, "backup db", "30 2 * * *", "python3 backup_sqlite.py /srv/app.sqlite /srv/backups"),
    (3, "disk report", "0 * * * *", "python3 disk_usage.py /srv"),
    (4, "always fails", "*/5 * * * *", "sh fail.sh"),
]


def write_new(path: str, data: bytes, age_days: float, now: float) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    mtime = now - age_days * DAY
    os.utime(path, (mtime, mtime))


def log_text(name: str, lines: int, rng: random.Random, end: float) -> bytes:
    levels = ["INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR"]
    out = []
    for i in range(lines):
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(end - (lines - i) * 37))
        level = rng.choice(levels)
        out.append(f"{at} {level} {name}: step {i} took {rng.randint(1, 999)} ms\n")
    return "".join(out).encode()


def make_db(path: str, rng: random.Random, now: float) -> int:
    if os.path.lexists(path):
        raise FileExistsError(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE tasks (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "
            "schedule TEXT NOT NULL, command TEXT NOT NULL)"
        )
        conn.execute(
            "CREATE TABLE runs (id INTEGER PRIMARY KEY, task_id INTEGER NOT NULL "
            "REFERENCES tasks(id), status TEXT NOT NULL, started_at_ms INTEGER NOT NULL, "
            "exit_code INTEGER)"
        )
        conn.executemany("INSERT INTO tasks VALUES (?, ?, ?, ?)", TASKS)
        runs = []
        for run_id in range(1, 41):
            task_id = rng.randint(1, len(TASKS))
            code = 3 if task_id == 4 else rng.choice([0, 0, 0, 1])
            status = "succeeded" if code == 0 else "failed"
            started = int((now - rng.randint(0, 7 * DAY)) * 1000)
            runs.append((run_id, task_id, status, started, code))
        conn.executemany("INSERT INTO runs VALUES (?, ?, ?, ?, ?)", runs)
        conn.commit()
    finally:
        conn.close()
    return len(TASKS) + len(runs)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {os.path.basename(argv[0])} DIR", file=sys.stderr)
        return 2
    root = argv[1]
    rng = random.Random(3)  # noqa: S311 -- deterministic demo content, not a secret
    now = time.time()
    logs, keep, db = (os.path.join(root, d) for d in ("logs", "keep", "db"))
    try:
        os.makedirs(root, exist_ok=True)
        for d in (logs, keep, db):
            os.mkdir(d)
        for name, (age, lines) in LOGS.items():
            write_new(os.path.join(logs, name), log_text(name, lines, rng, now), age, now)
            print(f"log  {os.path.join(logs, name)} ({age} days old)")
        write_new(os.path.join(logs, "notes.txt"), b"not a log file\n", 60, now)
        precious = os.path.join(keep, "precious.log")
        write_new(precious, log_text("precious.log", 100, rng, now), 90, now)
        link = os.path.join(logs, "linked-old.log")
        os.symlink(os.path.join("..", "keep", "precious.log"), link)
        os.utime(link, (now - 90 * DAY, now - 90 * DAY), follow_symlinks=False)
        print(f"link {link} -> {precious}")
        rows = make_db(os.path.join(db, "app.sqlite"), rng, now)
        print(f"db   {os.path.join(db, 'app.sqlite')} (2 tables, {rows} rows)")
    except FileExistsError as exc:
        print(f"refusing to overwrite existing sample data: {exc.filename or exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
