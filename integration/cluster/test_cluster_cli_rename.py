"""``ql3 cluster task edit --name`` through the real ``ql3`` binary against a real control
replica and PostgreSQL, at COLUMNS=80 (docs/protocols.md §4.5, Editing a task): a Chinese
rename worded as ``ql3 local task edit --name`` words it, the runs following the task under
its new name, the old name gone and free; a taken name and a bad one as one error line."""

from __future__ import annotations

import json

import pytest
from cluster_kit import Cluster
from test_cluster_cli import ZONE, cli, one_error_line

from qinglong.shared.names import NAME_RULE

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
OLD = "签到"
NEW = "京东签到"


def test_a_chinese_rename_at_80_columns_keeps_the_runs(cluster: Cluster) -> None:
    url = cluster.start_control("c1").url or ""
    admin, viewer = cluster.token("admin"), cluster.token("viewer")
    cli(cluster, url, admin, "task", "add", OLD, "--schedule", "0 8 * * *", "--timezone",
        ZONE, "--concurrency", "allow", "--", "echo", "签到成功")
    queued = cli(cluster, url, admin, "run", OLD).stdout
    assert f"{OLD}#1" in queued
    before = json.loads(cli(cluster, url, viewer, "task", "show", OLD, "--json").stdout)

    out = cli(cluster, url, admin, "task", "edit", OLD, "--name", NEW, "--label",
              "platform=jd")
    assert out.stdout == f"renamed task {OLD} to {NEW}\nedited task {NEW}: labels, name\n"
    after = json.loads(cli(cluster, url, viewer, "task", "show", NEW, "--json").stdout)
    assert (after["id"], after["next_fire_at"]) == (before["id"], before["next_fire_at"])
    assert after["labels"] == {"platform": "jd"}
    runs = json.loads(cli(cluster, url, viewer, "runs", "--task", NEW, "--json").stdout)
    assert [r["number"] for r in runs] == [1]
    shown = cli(cluster, url, viewer, "task", "show", NEW).stdout
    assert NEW in shown and "#1" in shown
    out = cli(cluster, url, viewer, "task", "show", OLD, code=2)
    assert one_error_line(out) == f"ql3: error: no such task '{OLD}'"
    assert f"{NEW}#2" in cli(cluster, url, admin, "run", NEW).stdout  # numbering goes on

    # the same name again: nothing to do; a taken name and a bad one: one line each
    assert cli(cluster, url, admin, "task", "edit", NEW, "--name", NEW
               ).stdout == f"task {NEW} unchanged\n"
    cli(cluster, url, admin, "task", "add", OLD, "--schedule", "@once", "--", "true")
    out = cli(cluster, url, admin, "task", "edit", OLD, "--name", NEW, code=1)
    assert one_error_line(out) == f"ql3: error: task '{NEW}' already exists"
    out = cli(cluster, url, admin, "task", "edit", OLD, "--name", "签到/2", code=2)
    assert one_error_line(out) == f"ql3: error: control refused the request: task name: " \
                                  f"{NAME_RULE}"
    assert json.loads(cli(cluster, url, viewer, "task", "show", OLD, "--json").stdout
                      )["schedule"] == "@once"
