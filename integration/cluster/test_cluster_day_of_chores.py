"""A Qinglong user's first hour through ``ql3 cluster`` (docs/protocols.md §4.5 "Names",
"Listing tasks", "Default zone"), as ``integration/test_day_of_chores.py`` does it locally:
real control replicas, a real worker, PostgreSQL and moto, the real ``ql3`` at COLUMNS=80 on a
machine set to Asia/Shanghai. Adds 京东签到 without --timezone (the caller's zone is kept),
sees Chinese output within 80 screen columns, lists by label and by a search, reads the
run's log by ``京东签到#1`` and ``京东签到@last``; a replica started with
``--default-timezone`` gives its zone instead, an explicit ``--timezone`` wins over both."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from cluster_kit import QL3, Cluster

from qinglong.shared.display import text_width

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
ZONE = "Asia/Shanghai"


def cli(cluster: Cluster, url: str, token: str, *args: str, code: int | None = 0,
        ) -> subprocess.CompletedProcess[str]:
    """``ql3 cluster ARGS`` at COLUMNS=80 in ZONE: the exit code, no traceback, and (on
    success, but for ``--json`` and logs) every line within 80 screen columns."""
    env = cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=token, COLUMNS="80", TZ=ZONE)
    out = subprocess.run([QL3, "cluster", *args], env=env, capture_output=True, text=True,
                         timeout=90, check=False)
    if code is not None:
        assert out.returncode == code, (args, out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stdout + out.stderr, out.stderr
    if out.returncode == 0 and not {"--json", "logs", "run"} & set(args):
        wide = [line for line in out.stdout.splitlines() if text_width(line) > 80]
        assert wide == [], (args, wide)
    return out


def _names(table: str) -> list[str]:
    lines = table.splitlines()
    assert lines[0].startswith("NAME"), lines
    return sorted(line.split("  ")[0] for line in lines[1:])


def _field(out: str, key: str) -> str:
    for line in out.splitlines():
        name, sep, rest = line.partition(": ")
        if sep and name.strip() == key:
            return rest
    raise AssertionError(f"no {key!r} in {out}")


def test_a_qinglong_users_first_hour_through_ql3_cluster(cluster: Cluster) -> None:
    url = cluster.start_control("c1").url or ""
    fixed = cluster.start_control("c2", "--default-timezone", "America/New_York").url or ""
    admin = cluster.token("admin")
    worker = cluster.token("worker", pool="pool-a", labels="zone=a")
    cluster.start_worker("w1", worker, url, labels="zone=a")

    out = cli(cluster, url, admin, "task", "add", "京东签到", "--schedule", "0 8 * * *",
              "--label", "zone=a", "--", "sh", "-c", "echo 签到成功")
    assert out.stdout.startswith("added task 京东签到 (")
    cli(cluster, url, admin, "task", "add", "每日 签到-2", "--schedule", "0 9 * * *",
        "--timezone", "Europe/Berlin", "--label", "zone=a", "--label", "platform=淘宝",
        "--", "sh", "-c", "echo 每日签到完成")
    cli(cluster, url, admin, "task", "add", "签到1", "--schedule", "@once", "--label",
        "zone=a", "--", "true")

    # one rule for names, in words; an NFKC-equal name is the same name
    dup = cli(cluster, url, admin, "task", "add", "签到１", "--schedule", "@once", "--",
              "true", code=None)
    assert (dup.returncode != 0 and "task_exists" in dup.stderr + dup.stdout) or \
        "exists" in dup.stderr, dup.stderr
    bad = cli(cluster, url, admin, "task", "add", "京东/签到", "--schedule", "@once", "--",
              "true", code=None)
    assert bad.returncode != 0 and "letters or digits of any language" in bad.stderr
    zone = cli(cluster, url, admin, "task", "add", "x", "--schedule", "@once", "--timezone",
               "asia/shanghai", "--", "true", code=None)
    assert zone.returncode != 0 and "did you mean Asia/Shanghai?" in zone.stderr, zone.stderr
    cron = cli(cluster, url, admin, "task", "add", "x", "--schedule", "61 * * * *", "--",
               "true", code=None)
    assert cron.returncode != 0 and "minute field" in cron.stderr, cron.stderr

    # the caller's zone is the task's; the list shows a zone only where it differs
    shown = cli(cluster, url, admin, "task", "show", "京东签到").stdout
    assert _field(shown, "timezone") == ZONE and _field(shown, "labels") == "zone=a"
    listed = cli(cluster, url, admin, "task", "list").stdout
    assert listed.splitlines()[0].split()[-1] == "LABELS"
    jd = next((line for line in listed.splitlines() if line.startswith("京东签到 ")), listed)
    berlin = next((line for line in listed.splitlines() if line.startswith("每日 签到-2 ")),
                  listed)
    assert "0 8 * * *  " in jd and "(Asia" not in jd, jd
    assert "0 9 * * * (Euro" in berlin, berlin
    # the next fire time whole at 80 columns: the schedule and the name give way first
    assert re.search(r"  \d{4}-\d\d-\d\d \d\d:\d\d:\d\d  ", berlin), berlin

    # labels (AND) and a case-insensitive search over names and commands, through the API
    assert _names(cli(cluster, url, admin, "task", "list", "--label", "platform=淘宝").stdout) == [
        "每日 签到-2"]
    assert _names(cli(cluster, url, admin, "task", "list", "--label", "zone=a", "--label",
                      "platform=淘宝").stdout) == ["每日 签到-2"]
    assert _names(cli(cluster, url, admin, "task", "list", "--search", "签到").stdout) == [
        "京东签到", "每日 签到-2", "签到1"]
    assert _names(cli(cluster, url, admin, "task", "list", "--search", "完成").stdout) == [
        "每日 签到-2"]
    none = cli(cluster, url, admin, "task", "list", "--label", "platform=京东").stdout
    assert len(none.splitlines()) <= 1 and "签到" not in none, none  # a header at most

    # run it by name; its Chinese output by TASK#N and TASK@last
    ran = cli(cluster, url, admin, "run", "京东签到", "--wait").stdout
    assert re.fullmatch(r"run 京东签到#1 \([0-9a-f-]{36}\): succeeded \(exit 0\)\n", ran), ran
    assert cli(cluster, url, admin, "logs", "京东签到#1").stdout == "签到成功\n"
    assert cli(cluster, url, admin, "logs", "京东签到@last").stdout == "签到成功\n"
    # --json events carry detail as an object (or null), never JSON text inside JSON
    events = json.loads(cli(cluster, url, admin, "inspect", "京东签到#1", "--json").stdout)[
        "events"]
    details = [e["detail"] for e in events if e["detail"] is not None]
    assert details and all(isinstance(d, dict) for d in details), events
    runs = cli(cluster, url, admin, "runs", "--task", "京东签到").stdout.splitlines()
    assert runs[1].split()[0] == "京东签到#1" and "succeeded" in runs[1]

    # a forbid refusal names the run in progress
    cli(cluster, url, admin, "task", "add", "长任务", "--schedule", "@once", "--label",
        "zone=a", "--", "sleep", "30")
    cli(cluster, url, admin, "run", "长任务")
    refused = cli(cluster, url, admin, "run", "长任务", code=1)
    assert re.search(r"run refused: run 长任务#1 is (queued|dispatching|running) and the "
                     r"task's concurrency policy is forbid", refused.stderr), refused.stderr
    cli(cluster, url, admin, "cancel", "长任务@last", "--wait")
    cli(cluster, url, admin, "task", "rm", "长任务")

    raw = cli(cluster, url, admin, "task", "list", "--json").stdout
    assert '"京东签到"' in raw and "\\u4eac" not in raw
    assert {t["name"] for t in json.loads(raw)} == {"京东签到", "每日 签到-2", "签到1"}

    # a replica with --default-timezone: its zone wins over the caller's, --timezone over it
    cli(cluster, fixed, admin, "task", "add", "纽约", "--schedule", "0 8 * * *", "--", "true")
    cli(cluster, fixed, admin, "task", "add", "上海", "--schedule", "0 8 * * *",
        "--timezone", ZONE, "--", "true")
    assert _field(cli(cluster, url, admin, "task", "show", "纽约").stdout,
                  "timezone") == "America/New_York"
    assert _field(cli(cluster, url, admin, "task", "show", "上海").stdout,
                  "timezone") == ZONE
