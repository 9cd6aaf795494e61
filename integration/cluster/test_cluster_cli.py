"""``ql3 cluster`` through the real ``ql3`` binary against real control replicas, a real worker,
PostgreSQL and moto (issue 13 item 2; docs/protocols.md §4.5): a scripted session at
COLUMNS=80 in a zone with an offset (add, edit, next, run --wait, runs, inspect by
``TASK#1`` and ``TASK@last`` naming the worker, logs --tail, cancel of a running run,
occurrences, workers, list and show with the last run as ``ql3 local`` prints it, rm), every
line at most 80 columns; then each error class as one line with its
exit code: control unreachable, a bad token, a viewer token writing, an unknown task and run,
a conflict, a log retired by retention, and a replica whose database is gone (503 with the
readiness reason). Never a traceback, never the token."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
from cluster_kit import QL3, Cluster, PrivatePostgres, free_port, wait_for

from qinglong.shared.names import NAME_RULE

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
ZONE = "Asia/Shanghai"  # +08:00 all year: times read with a fixed offset
STAMP = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \+08:00"
# a run's status line, a message printed whole at any width (tables fit the terminal)
STATUS_LINE = re.compile(r"(queued run|cancelled: run|cancel requested: run|run) \S+#\d+ "
                         r"\([0-9a-f-]{36}\)")


def cli(cluster: Cluster, url: str, token: str, *args: str, stdin: str = "",
        code: int | None = 0) -> subprocess.CompletedProcess[str]:
    """``ql3 cluster ARGS`` at COLUMNS=80 in ``ZONE``; asserts the exit code (None: any), no
    traceback, the token nowhere in the output, and, for a success, no line wider than 80
    columns but messages (an error line names URLs and is as long as they are, a run's status
    line its full id; ``--wide`` shortens nothing)."""
    env = cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=token, COLUMNS="80", TZ=ZONE)
    out = subprocess.run([QL3, "cluster", *args], env=env, input=stdin, capture_output=True,
                         text=True, timeout=90, check=False)
    shown = out.stdout + out.stderr
    if code is not None:
        assert out.returncode == code, (args, out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in shown, (args, shown)
    assert not token or token not in shown, (args, shown)
    if not {"--json", "--wide", "logs"} & set(args) and out.returncode == 0:
        wide = [line for line in shown.splitlines()
                if len(line) > 80 and not STATUS_LINE.match(line)]
        assert wide == [], (args, wide)
    return out


def one_error_line(out: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (nothing on stdout)."""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and out.stdout == "", (out.stdout, out.stderr)
    return lines[0]


def started_cluster(cluster: Cluster, replicas: int = 2) -> tuple[list[str], dict[str, str]]:
    """Replicas and one worker (labels zone=a); their URLs and a token per scope."""
    urls = [c.url or "" for c in cluster.start_controls([f"c{i + 1}" for i in range(replicas)])]
    tokens = {scope: cluster.token(scope) for scope in ("admin", "operator", "viewer")}
    worker = cluster.token("worker", pool="pool-a", labels="zone=a")
    cluster.start_worker("w1", worker, ",".join(urls), labels="zone=a")
    return urls, tokens


def runs_json(cluster: Cluster, url: str, token: str, task: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(
        cli(cluster, url, token, "runs", "--task", task, "--json").stdout)
    return found


def test_a_scripted_session_at_80_columns(cluster: Cluster) -> None:
    urls, tokens = started_cluster(cluster)
    url, admin = ",".join(urls), tokens["admin"]

    out = cli(cluster, url, admin, "task", "add", "hello", "--schedule", "0 3 * * *",
              "--timezone", ZONE, "--env", "GREETING=hi", "--secret-env", "API_KEY",
              "--label", "zone=a", "--", "sh", "-c",
              'echo "$GREETING from ql3"; echo "key ${#API_KEY}"; echo line3; echo line4',
              stdin="s3cr3t-value\n")
    assert re.fullmatch(r"added task hello \([0-9a-f-]{36}\)\n", out.stdout), out.stdout
    out = cli(cluster, url, admin, "task", "edit", "hello", "--schedule", "30 2 * * *",
              "--env", "MODE=full")
    assert out.stdout == "edited task hello: env, schedule\n"
    assert cli(cluster, url, admin, "task", "edit", "hello", "--max-attempts", "1"
               ).stdout == "task hello unchanged\n"

    lines = cli(cluster, url, tokens["viewer"], "task", "next", "hello", "-n", "3"
                ).stdout.splitlines()
    assert lines[0] == f"next slots of hello (30 2 * * *, {ZONE})"
    assert len(lines) == 4
    for line in lines[1:]:
        assert re.fullmatch(rf"  \d{{4}}-\d{{2}}-\d{{2}} 02:30:00 \+08:00  \(here: {STAMP}\)",
                            line), line

    out = cli(cluster, url, tokens["operator"], "run", "hello", "--wait")
    assert re.fullmatch(r"run hello#1 \([0-9a-f-]{36}\): succeeded \(exit 0\)\n", out.stdout)
    assert re.fullmatch(r"queued run hello#1 \([0-9a-f-]{36}\); waiting for it to end\n",
                        out.stderr)
    run_id = out.stdout.split("(")[1].split(")")[0]

    table = cli(cluster, url, tokens["viewer"], "runs", "--task", "hello").stdout.splitlines()
    assert table[0].split() == ["RUN", "ID", "STATUS", "EXIT", "STARTED", "DURATION"]
    assert table[1].split()[:4] == ["hello#1", run_id[-8:], "succeeded", "0"]
    assert re.search(STAMP, table[1]), table[1]

    by_number = cli(cluster, url, tokens["viewer"], "inspect", "hello#1").stdout.splitlines()
    by_last = cli(cluster, url, tokens["viewer"], "inspect", "hello@last").stdout.splitlines()
    by_suffix = cli(cluster, url, tokens["viewer"], "inspect", run_id[-8:]).stdout.splitlines()
    assert by_number[0] == by_last[0] == by_suffix[0] == \
        f"run hello#1 ({run_id}): succeeded (exit 0)"
    # when the events do not fit 80 columns in full, the date and offset the times share
    # are said once, in the titles, and event names and reasons stay whole
    title = re.fullmatch(r"attempts( \(\d{4}-\d{2}-\d{2} \+08:00\))?:", by_number[1])
    assert title is not None and by_number[2].split() == [
        "ATTEMPT", "STATUS", "EXIT", "STARTED", "TOOK", "WORKER", "REASON"], by_number
    started = r"\d{2}:\d{2}:\d{2}" if title.group(1) else STAMP
    # the worker by the name it was started with, not its incarnation's id
    assert re.fullmatch(rf"  1        succeeded  0     {started}\s+\d+s\s+w1\s+-",
                        by_number[3]), by_number
    assert by_number[4] == f"events{title.group(1) or ''}:" and by_number[5].split()[:4] == [
        "AT", "EVENT", "STATUS", "DETAIL"]
    assert any(re.search(r"running -> succeeded", row) for row in by_number[6:]), by_number

    log = cli(cluster, url, tokens["viewer"], "logs", "hello#1").stdout
    assert log == "hi from ql3\nkey 12\nline3\nline4\n"  # the secret reached the task, unshown
    assert cli(cluster, url, tokens["viewer"], "logs", "hello@last", "--tail", "2"
               ).stdout == "line3\nline4\n"

    show = cli(cluster, url, tokens["viewer"], "task", "show", "hello").stdout
    assert """      command: sh -c 'echo "$GREETING from ql3"; echo "key ${#API_KEY}"; echo l…""" \
        in show
    assert "   secret_env: API_KEY=********\n" in show and "s3cr3t" not in show
    assert "          env: GREETING=hi\n" in show and "          env: MODE=full\n" in show
    assert "     schedule: 30 2 * * *\n" in show and "       labels: zone=a\n" in show
    assert "recent runs:\n" in show and "  hello#1  " in show
    assert re.search(r"edited: env, schedule \(by admin-", show), show
    # the last run as `ql3 local task show` gives it: status, finish time with its offset
    assert re.search(rf"\n     last_run: succeeded, finished {STAMP}, took \d+s\n", show), show

    cli(cluster, url, admin, "task", "add", "sleeper", "--schedule", "@once", "--label",
        "zone=a", "--", "sleep", "120")
    out = cli(cluster, url, tokens["operator"], "run", "sleeper")
    assert out.stdout.startswith("queued run sleeper#1 (")
    assert wait_for(lambda: runs_json(cluster, url, admin, "sleeper")[0]["status"]
                    == "running", 30, 0.3)
    workers = cli(cluster, url, tokens["viewer"], "workers").stdout.splitlines()
    assert workers[0].split() == ["NAME", "ID", "STATE", "LAST", "SEEN", "HELD", "LABELS"]
    assert re.fullmatch(rf"w1\s+[0-9a-f]{{8}}\s+live\s+{STAMP}\s+1\s+zone=a", workers[1]), \
        workers
    out = cli(cluster, url, tokens["operator"], "cancel", "sleeper@last", "--wait")
    assert out.stderr.startswith("cancel requested: run sleeper#1 (")
    assert re.fullmatch(r"run sleeper#1 \([0-9a-f-]{36}\): cancelled( \(exit -?\d+\))?\n",
                        out.stdout), out.stdout
    out = cli(cluster, url, tokens["operator"], "cancel", "sleeper#1", code=1)
    assert one_error_line(out) == "ql3: error: run 'sleeper#1' has already finished"

    cli(cluster, url, admin, "task", "add", "tick", "--schedule", "*/2 * * * * *",
        "--label", "zone=a", "--", "true")
    assert wait_for(lambda: any(o["outcome"] == "run_created" for o in json.loads(cli(
        cluster, url, admin, "occurrences", "tick", "--json").stdout)), 30, 0.5)
    assert cli(cluster, url, tokens["operator"], "task", "disable", "tick"
               ).stdout == "task tick disabled\n"
    assert " next_fire_at: disabled\n" in cli(cluster, url, tokens["viewer"], "task", "show",
                                               "tick").stdout
    ledger = cli(cluster, url, tokens["viewer"], "occurrences", "tick").stdout.splitlines()
    # a range of skipped slots (two times) would not fit 80 columns with offsets: the
    # offset then moves into the headers, and the outcome always stays whole
    narrow = ledger[0].split() == ["OUTCOME", "FIRST", "SLOT", "(+08:00)", "LAST", "SLOT",
                                   "(+08:00)", "SLOTS", "RUN"]
    assert narrow or ledger[0].split() == ["OUTCOME", "FIRST", "SLOT", "LAST", "SLOT",
                                           "SLOTS", "RUN"], ledger
    when = STAMP[:-len(r" \+08:00")] if narrow else STAMP
    assert any(re.match(rf"run_created\s+{when}\s+1\s+[0-9a-f]{{8}}$", row)
               for row in ledger[1:]), ledger

    listing = cli(cluster, url, tokens["viewer"], "task", "list").stdout.splitlines()
    head = listing[0].split()  # tasks with labels: a LABELS column, and when the times do
    assert head[:3] == ["NAME", "SCHEDULE", "NEXT"] and head[-2:] == ["COMMAND", "LABELS"]
    shared = "(+08:00)" in head  # not fit whole, the offset they share said in the header
    rows = {row.split()[0]: row for row in listing[1:]}
    assert set(rows) == {"hello", "sleeper", "tick"}
    # at 80 columns the next fire time and the last run (status and duration, as
    # `ql3 local task list`) stay whole; the labels and the command give way
    when = STAMP[:-len(r" \+08:00")] if shared else STAMP
    assert re.match(rf"hello\s+30 2 \* \* \*.*\s{when}\s+succeeded \d+s\s+sh -c ",
                    rows["hello"]), listing
    assert re.search(r"\s+cancelled \d+s\s+sleep ", rows["sleeper"]), listing
    assert " disabled " in rows["tick"]
    wide = cli(cluster, url, tokens["viewer"], "task", "list", "--wide").stdout
    assert re.search(rf"  succeeded {STAMP} \(\d+s\)  ", wide), wide  # adds the finish time

    assert cli(cluster, url, admin, "task", "rm", "hello").stdout == "removed task hello\n"
    out = cli(cluster, url, tokens["viewer"], "task", "show", "hello", code=2)
    assert one_error_line(out) == "ql3: error: no such task 'hello'"
    # the removed task's runs stay readable by reference, and listed by its name
    assert cli(cluster, url, tokens["viewer"], "inspect", "hello#1").stdout.startswith(
        f"run hello#1 ({run_id}): succeeded")
    listed = cli(cluster, url, tokens["viewer"], "runs", "--task", "hello").stdout
    assert listed.splitlines()[1].split()[:2] == ["hello#1", run_id[-8:]], listed


def test_long_names_piped_and_at_80_columns(cluster: Cluster) -> None:
    """A long task name: ``run --wait`` piped without COLUMNS prints its status lines whole
    (the exit code included); ``runs`` keeps ``#N`` of the reference, ``inspect`` its event
    names and reasons, ``occurrences`` its outcomes, every table within 80 columns."""
    urls, tokens = started_cluster(cluster, replicas=1)
    url, admin, name = urls[0], tokens["admin"], "jd-daily-sign-in-backup"
    cli(cluster, url, admin, "task", "add", name, "--schedule", "@once", "--label", "zone=a",
        "--", "sh", "-c", "exit 3")
    env = {k: v for k, v in cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=tokens["operator"],
                                        TZ=ZONE).items() if k != "COLUMNS"}
    out = subprocess.run([QL3, "cluster", "run", name, "--wait"], env=env, text=True,
                         capture_output=True, timeout=90, check=False)  # piped: no terminal
    assert out.returncode == 1, out
    assert re.fullmatch(rf"run {name}#1 \([0-9a-f-]{{36}}\): failed \(exit 3\)\n",
                        out.stdout), out.stdout
    assert re.fullmatch(rf"queued run {name}#1 \([0-9a-f-]{{36}}\); waiting for it to end\n"
                        r"ql3: the run ended failed\n", out.stderr), out.stderr

    table = cli(cluster, url, admin, "runs").stdout.splitlines()  # at most 80 (cli asserts)
    assert re.fullmatch(r"jd-daily-s.*…#1", table[1].split()[0]), table
    shown = cli(cluster, url, admin, "inspect", f"{name}@last").stdout
    assert "attempt_completed" in shown and "running -> failed" in shown, shown
    cli(cluster, url, admin, "task", "add", "every-second-slow", "--schedule", "* * * * * *",
        "--label", "zone=a", "--", "sleep", "3")
    assert wait_for(lambda: any(o["outcome"] == "skipped_active" for o in json.loads(cli(
        cluster, url, admin, "occurrences", "every-second-slow", "--json").stdout)), 30, 0.5)
    cli(cluster, url, admin, "task", "disable", "every-second-slow")
    ledger = cli(cluster, url, admin, "occurrences", "every-second-slow").stdout.splitlines()
    outcomes = {row.split()[0] for row in ledger[1:]}
    assert "skipped_active" in outcomes and outcomes <= {"run_created", "skipped_active"}, \
        ledger


def test_a_run_no_live_worker_can_take_says_why_it_waits(cluster: Cluster) -> None:
    """The only worker declares zone=a: a run of a zone=b task is queued and a warning says
    no live worker has its labels; ``inspect`` of the queued run says why it waits. A
    zone=a task gets no warning."""
    urls, tokens = started_cluster(cluster, replicas=1)
    url, admin = urls[0], tokens["admin"]
    for name, zone in (("in-b", "zone=b"), ("in-a", "zone=a")):
        cli(cluster, url, admin, "task", "add", name, "--schedule", "@once", "--label", zone,
            "--", "true")
    queued = cli(cluster, url, tokens["operator"], "run", "in-b")
    assert queued.stderr == ("warning: no live worker has the labels zone=b: the run waits "
                             "for one\n")
    shown = cli(cluster, url, tokens["viewer"], "inspect", "in-b@last").stdout
    assert "waiting: no live worker has the labels zone=b" in shown, shown
    assert cli(cluster, url, tokens["operator"], "run", "in-a", "--wait").stderr.startswith(
        "queued run in-a#1 ") and "warning" not in cli(
        cluster, url, tokens["operator"], "run", "in-a").stderr


def test_each_error_class_is_one_line_with_its_exit_code(cluster: Cluster) -> None:
    urls, tokens = started_cluster(cluster, replicas=1)
    url, admin, viewer = urls[0], tokens["admin"], tokens["viewer"]
    cli(cluster, url, admin, "task", "add", "job", "--schedule", "@once", "--label",
        "zone=a", "--", "echo", "done")

    nobody = f"http://127.0.0.1:{free_port()}"
    out = cli(cluster, nobody, admin, "task", "list", code=1)
    assert one_error_line(out) == f"ql3: error: cannot reach control at {nobody}: " \
                                  "connection refused"
    out = cli(cluster, f"{nobody},{url}", viewer, "task", "list")  # the next replica answers
    assert out.stdout.splitlines()[1].startswith("job ")

    out = cli(cluster, url, "ql3_" + "A" * 43, "task", "list", code=1)
    assert one_error_line(out) == f"ql3: error: token rejected by control at {url}: set " \
                                  "QL3_TOKEN to a valid token"
    out = cli(cluster, url, "", "task", "list", code=2)
    assert one_error_line(out).startswith("ql3: error: QL3_TOKEN: not set")

    out = cli(cluster, url, viewer, "task", "add", "x", "--schedule", "@once", "--", "true",
              code=1)
    assert one_error_line(out) == ("ql3: error: forbidden: this token lacks the admin scope "
                                   f"(control at {url})")
    out = cli(cluster, url, viewer, "run", "job", code=1)
    assert one_error_line(out) == ("ql3: error: forbidden: this token lacks the operator "
                                   f"scope (control at {url})")

    out = cli(cluster, url, viewer, "task", "show", "nosuch", code=2)
    assert one_error_line(out) == "ql3: error: no such task 'nosuch'"
    out = cli(cluster, url, viewer, "occurrences", "nosuch", code=2)
    assert one_error_line(out) == "ql3: error: no such task 'nosuch'"
    out = cli(cluster, url, viewer, "runs", "--task", "nosuch", code=2)  # not an empty table
    assert one_error_line(out) == "ql3: error: no such task 'nosuch'"
    out = cli(cluster, url, viewer, "inspect", "job#7", code=2)
    assert one_error_line(out) == "ql3: error: no such run 'job#7'"
    out = cli(cluster, url, viewer, "logs", "abc", code=2)
    assert one_error_line(out) == ("ql3: error: no such run 'abc' (a run-id suffix needs at "
                                   "least 6 hex digits)")

    out = cli(cluster, url, admin, "task", "add", "job", "--schedule", "@once", "--", "true",
              code=1)
    assert one_error_line(out) == "ql3: error: task 'job' already exists"
    out = cli(cluster, url, admin, "task", "add", "bad", "--schedule", "61 * * * *", "--",
              "true", code=2)
    assert one_error_line(out) == ("ql3: error: control refused the request: --schedule: "
                                   "minute field is invalid (5 fields, or 6 with seconds "
                                   "first, or an @ alias such as @daily)")  # as locally
    out = cli(cluster, url, admin, "task", "add", "京东/签到", "--schedule", "@once", "--",
              "true", code=2)  # said in words, by the name the user typed it as, not echoed
    assert one_error_line(out) == ("ql3: error: control refused the request: task name: "
                                   f"{NAME_RULE}")
    out = cli(cluster, url, admin, "task", "add", "leak", "--schedule", "@once",
              "--secret-env", "K=plain", "--", "true", code=2)
    assert "plain" not in out.stderr

    # a log retired by retention: 410, with when (retention 0: the next sweep retires it)
    with cluster.api(url, admin) as api:
        assert api.patch("/v1/tasks/job", json={"log_retention_s": 0}).status_code == 200
    cli(cluster, url, tokens["operator"], "run", "job", "--wait")
    first = cli(cluster, url, viewer, "logs", "job#1", code=None)  # the sweep may be first
    assert (first.returncode, first.stdout) in ((0, "done\n"), (1, "")), first

    def retired() -> subprocess.CompletedProcess[str] | None:
        out = cli(cluster, url, viewer, "logs", "job#1", code=None)
        return out if out.returncode == 1 else None

    out = wait_for(retired, 60, 1.0)
    assert out is not None, "the log was not retired within 60 s"
    assert re.fullmatch(r"the log of attempt 1 is gone \(retired at " + STAMP + r"\)\n"
                        r"ql3: error: the log of attempt 1 was retired by retention at "
                        + STAMP + r" \((deleted|already_absent)\)\n", out.stderr), out.stderr


def test_a_replica_whose_database_is_gone_answers_with_its_readiness_reason(
        private_cluster: Cluster, private_pg: PrivatePostgres) -> None:
    cluster = private_cluster
    url = cluster.start_control("c1").url or ""
    viewer = cluster.token("viewer")
    assert cli(cluster, url, viewer, "task", "list").stdout == (
        "no tasks yet: `ql3 cluster task add --help` says how to add one\n")
    assert cli(cluster, url, viewer, "task", "list", "--search", "签到").stdout == (
        "no task matches the filters\n")
    private_pg.stop("fast")
    out = cli(cluster, url, viewer, "task", "list", code=1)
    assert one_error_line(out) == (f"ql3: error: control at {url} is not ready: "
                                   "database_unavailable; retry later")
