"""What a new user following the README met in ``ql3 cluster`` and the control API, through
the real ``ql3`` binary and real HTTP against a real control replica (PostgreSQL, moto):
``task list`` at 80 columns tells cut names apart and sorts them naturally, as ``ql3 local``
does (shared/display.py)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from cluster_kit import QL3, Cluster

from qinglong.shared.display import ELLIPSIS, text_width

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
# QL3_BIN: another build's `ql3` as the client (say, main's, to show a test fails there)
CLIENT = os.environ.get("QL3_BIN") or QL3
FARM = "京东签到每日领取京豆任务并且顺便领取东东农场的水滴"  # 25 characters, 50 columns


def _cli(cluster: Cluster, url: str, token: str, *args: str, stdin: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    env = cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=token, COLUMNS="80",
                      TZ="Asia/Shanghai")
    return subprocess.run([CLIENT, "cluster", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=90, check=False)


def test_task_list_tells_cut_names_apart_and_sorts_them_naturally(cluster: Cluster) -> None:
    url = cluster.start_control("c1").url or ""
    admin = cluster.token("admin")
    for name in (FARM + "甲", FARM + "乙", "task10", "task2", "task1"):
        added = _cli(cluster, url, admin, "task", "add", name, "--schedule", "0 8 * * *",
                     "--timezone", "Asia/Shanghai", "--label", "platform=京东", "--", "sh",
                     "-c", "echo 签到成功，获得京豆 10 个")
        assert added.returncode == 0, added.stderr
    out = _cli(cluster, url, admin, "task", "list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert all(text_width(line) <= 80 for line in lines), lines
    shown = [line.split("  ")[0] for line in lines[1:]]
    assert shown[:3] == ["task1", "task2", "task10"], shown
    farm = [cell for cell in shown if cell.startswith("京东签到")]
    assert len(farm) == 2 and farm[0] != farm[1], lines
    assert all(ELLIPSIS in cell for cell in farm) and {c[-1] for c in farm} == {"甲", "乙"}


def test_a_label_without_a_key_or_a_value_is_refused_in_words(cluster: Cluster) -> None:
    """Cluster labels are ``key=value`` (docs/protocols.md "Names"): ``=``, ``a=`` and
    ``=b`` are refused on one line naming the label rule, and nothing is stored."""
    url = cluster.start_control("c1").url or ""
    admin = cluster.token("admin")
    for label in ("=", "platform=", "=京东", "platform"):
        added = _cli(cluster, url, admin, "task", "add", "签到", "--schedule", "@once",
                     "--label", label, "--", "true")
        assert added.returncode in (1, 2), (label, added.stdout, added.stderr)
        assert "label" in added.stderr and "Traceback" not in added.stderr, added.stderr
        said = added.stderr.strip().splitlines()[-1]
        assert "--label" in said and ("K=V" in said or "letters or digits" in said), said
    listed = _cli(cluster, url, admin, "task", "list", "--json")
    assert json.loads(listed.stdout) == [], listed.stdout


def test_logs_keep_a_progress_line_whole_and_tail_counts_it_as_one(cluster: Cluster) -> None:
    """A progress bar redrawn with ``\\r``: ``ql3 cluster logs`` writes the bytes as the task
    wrote them (a terminal redraws the bar), and ``--tail N`` counts lines ending in
    ``\\n`` only, as ``ql3 local logs --tail`` does (docs/panel.md "Run detail")."""
    url = cluster.start_control("c1").url or ""
    admin = cluster.token("admin")
    worker = cluster.token("worker", pool="pool-a", labels="zone=a")
    cluster.start_worker("w1", worker, url, labels="zone=a")
    added = _cli(cluster, url, admin, "task", "add", "进度条", "--schedule", "@once",
                 "--label", "zone=a", "--", "sh", "-c",
                 "printf '下载 10%%\\r下载 50%%\\r下载 100%%\\n'; echo 完成")
    assert added.returncode == 0, added.stderr
    ran = _cli(cluster, url, admin, "run", "进度条", "--wait")
    assert ran.returncode == 0, (ran.stdout, ran.stderr)
    env = cluster.env(QL3_CONTROL_URL=url, QL3_TOKEN=admin, COLUMNS="80")
    whole = "下载 10%\r下载 50%\r下载 100%\n完成\n".encode()
    for extra, expected in (((), whole), (("--tail", "2"), whole),
                            (("--tail", "1"), "完成\n".encode())):
        out = subprocess.run([CLIENT, "cluster", "logs", "进度条@last", *extra], env=env,
                             capture_output=True, timeout=90, check=False)  # bytes
        assert (out.returncode, out.stdout) == (0, expected), (extra, out.stdout, out.stderr)


def _labels(cluster: Cluster, url: str, token: str, task: str) -> dict[str, str]:
    shown = _cli(cluster, url, token, "task", "show", task, "--json")
    assert shown.returncode == 0, shown.stderr
    labels: dict[str, str] = json.loads(shown.stdout)["labels"]
    return labels


def test_unset_label_takes_a_label_as_written_and_checks_its_value(cluster: Cluster) -> None:
    """``task edit --unset-label`` takes ``K=V`` as ``--label`` writes it (as ``ql3 local
    task edit --unset-label`` takes a label as shown) and removes K only while its value is
    V; another value is refused (exit 2) naming the value the task has, nothing changed."""
    url = cluster.start_control("c1").url or ""
    admin = cluster.token("admin")
    added = _cli(cluster, url, admin, "task", "add", "京东签到新", "--schedule", "@once",
                 "--label", "platform=京东", "--label", "zone=华东", "--", "true")
    assert added.returncode == 0, added.stderr

    other = _cli(cluster, url, admin, "task", "edit", "京东签到新",
                 "--unset-label", "platform=淘宝")
    assert other.returncode == 2 and other.stdout == "", (other.stdout, other.stderr)
    said = other.stderr.strip().splitlines()[-1]
    assert "platform=淘宝 is not a label of the task" in said and "京东" in said, said
    assert _labels(cluster, url, admin, "京东签到新") == {"platform": "京东", "zone": "华东"}

    edited = _cli(cluster, url, admin, "task", "edit", "京东签到新",
                  "--unset-label", "platform=京东")
    assert edited.returncode == 0, edited.stderr
    assert edited.stdout == "edited task 京东签到新: labels\n"
    assert _labels(cluster, url, admin, "京东签到新") == {"zone": "华东"}
    by_key = _cli(cluster, url, admin, "task", "edit", "京东签到新", "--unset-label", "zone")
    assert by_key.returncode == 0, by_key.stderr
    assert _labels(cluster, url, admin, "京东签到新") == {}


def test_vars_set_plain_makes_a_variable_the_export_prints(cluster: Cluster) -> None:
    """``vars set --plain`` stores a plain variable (``vars export`` prints it), as ``ql3
    local vars set --plain`` does; without the flag a new variable is secret and a held one
    keeps its kind; ``--secret`` makes it secret again (out of the export)."""
    url = cluster.start_control("c1").url or ""
    op, viewer = cluster.token("operator"), cluster.token("viewer")
    plain = _cli(cluster, url, op, "vars", "set", "HINT", "--plain", "--remark", "签到提示",
                 stdin="plainval")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout == "set variable HINT value #1\n"
    secret = _cli(cluster, url, op, "vars", "set", "JD_COOKIE", stdin="pt_key=秘密;")
    assert secret.returncode == 0, secret.stderr
    added = _cli(cluster, url, op, "vars", "set", "HINT", "--add", stdin="第二个提示")
    assert added.returncode == 0, added.stderr

    exported = _cli(cluster, url, viewer, "vars", "export")
    assert exported.returncode == 0, exported.stderr
    lines = exported.stdout.splitlines()
    assert "HINT=plainval" in lines and "# 签到提示" in lines, lines
    assert "HINT=第二个提示" in lines, lines
    assert "秘密" not in exported.stdout and "JD_COOKIE" not in exported.stdout
    listed = json.loads(_cli(cluster, url, viewer, "vars", "list", "--json").stdout)
    assert {v["name"]: v["secret"] for v in listed} == {"HINT": False, "JD_COOKIE": True}

    again = _cli(cluster, url, op, "vars", "set", "HINT", "--secret", stdin="plainval")
    assert again.returncode == 0, again.stderr
    assert "HINT" not in _cli(cluster, url, viewer, "vars", "export").stdout
