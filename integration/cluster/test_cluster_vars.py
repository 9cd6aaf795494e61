"""Global variables of the cluster (环境变量) through the real ``ql3 cluster``, real control,
a real worker, PostgreSQL and moto (docs/protocols.md §4.5 "Global variables").

Several values per name with remarks and on/off flags, the enabled ones joined with ``&``
into each attempt's environment, the task's own env over them, a pool scope (a claim answer
carries only the variables of the claiming pool's scope), the viewer reading names, remarks
and flags only and refused writes, values never in any answer or output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cluster_kit import Cluster
from test_cluster_cli import cli, runs_json, started_cluster

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
COOKIES = ("pt_key=AAAsecret1;", "pt_key=BBBsecret2;", "pt_key=CCCsecret3;")


def _run_and_read(cluster: Cluster, url: str, token: str, task: str) -> str:
    cli(cluster, url, token, "run", task, "--wait", code=None)
    runs = runs_json(cluster, url, token, task)
    return str(cli(cluster, url, token, "logs", f"{task}#{len(runs)}").stdout)


def test_values_remarks_flags_scope_and_override_reach_each_attempt(cluster: Cluster) -> None:
    urls, tokens = started_cluster(cluster, replicas=1)
    url, op, viewer = urls[0], tokens["operator"], tokens["viewer"]
    for n, (cookie, remark) in enumerate(zip(COOKIES, ("账号一", "账号二", "账号三"),
                                             strict=True)):
        extra = ("--add",) if n else ()
        out = cli(cluster, url, op, "vars", "set", "JD_COOKIE", *extra, "--remark", remark,
                  stdin=cookie)
        assert f"value #{n + 1}" in out.stdout
    cli(cluster, url, op, "vars", "disable", "JD_COOKIE", "--index", "2")
    cli(cluster, url, op, "vars", "set", "OTHER_POOL_ONLY", "--pool", "pool-b",
        stdin="not-for-pool-a")
    cli(cluster, url, op, "vars", "set", "GREETING", stdin="from-vars")
    cli(cluster, url, tokens["admin"], "task", "add", "jd_sign", "--schedule", "@once",
        "--env", "GREETING=from-task", "--", "sh", "-c",
        'echo "ck=[$(printf %s "$JD_COOKIE" | rev)] other=[$OTHER_POOL_ONLY]'
        ' greeting=[$GREETING] masked=[$JD_COOKIE]"')

    log = _run_and_read(cluster, url, op, "jd_sign")
    # the value reaches the task (printed reversed: the worker masks a secret variable's
    # exact value in the log, docs/operations.md §9, as the last field shows)
    assert f"ck=[{(COOKIES[0] + '&' + COOKIES[2])[::-1]}]" in log
    assert "other=[]" in log and "greeting=[from-task]" in log
    assert "masked=[***]" in log and COOKIES[0] not in log

    cli(cluster, url, op, "vars", "enable", "JD_COOKIE", "--index", "2")
    cli(cluster, url, op, "vars", "rm", "JD_COOKIE", "--index", "1")
    assert f"ck=[{(COOKIES[1] + '&' + COOKIES[2])[::-1]}]" in _run_and_read(
        cluster, url, op, "jd_sign")

    listed = cli(cluster, url, viewer, "vars", "list").stdout
    assert "JD_COOKIE=********  (2 of 2 on, all pools)" in listed and "账号二" in listed
    assert "pools pool-b" in listed
    views: list[dict[str, Any]] = json.loads(
        cli(cluster, url, viewer, "vars", "list", "--json").stdout)
    jd = next(v for v in views if v["name"] == "JD_COOKIE")
    assert [(v["index"], v["remark"], v["enabled"]) for v in jd["values"]] == [
        (1, "账号二", True), (2, "账号三", True)]
    denied = cli(cluster, url, viewer, "vars", "set", "X", stdin="v", code=None)
    assert denied.returncode != 0 and "operator" in denied.stderr

    refused = cli(cluster, url, op, "vars", "set", "BIG", stdin="x" * (128 * 1024 + 1),
                  code=None)
    assert refused.returncode != 0 and "x" * 64 not in refused.stderr

    with cluster.api(url, tokens["admin"]) as api:
        everything = json.dumps(api.get("/v1/vars").json()) + api.get("/metrics").text
        events = api.get("/v1/runs", params={"task": "jd_sign"}).text
    everything += events + listed + json.dumps(views) + "".join(p.log() for p in cluster.procs)
    assert not any(secret in everything for secret in (*COOKIES, "not-for-pool-a"))


def test_path_and_loader_names_are_refused_by_ql3_cluster_vars_set(cluster: Cluster) -> None:
    """The rule of ``ql3 local vars set`` (``shared/variable_limits.check_settable_name``):
    PATH points to the task's own ``--env PATH=``; nothing is stored, no value is shown."""
    urls, tokens = started_cluster(cluster, replicas=1)
    url, op = urls[0], tokens["operator"]
    for name in ("PATH", "LD_PRELOAD", "QL3_CONTROL_URL"):
        out = cli(cluster, url, op, "vars", "set", name, stdin="x-secret-value", code=None)
        assert out.returncode != 0 and out.stdout == "", (name, out.stderr)
        assert f"{name} cannot be a global variable" in out.stderr
        assert "x-secret-value" not in out.stderr
    assert "--env PATH=" in cli(cluster, url, op, "vars", "set", "PATH", stdin="x",
                                code=None).stderr
    cli(cluster, url, op, "vars", "set", "NODE_OPTIONS", stdin="--max-old-space-size=64")
    listed = json.loads(cli(cluster, url, op, "vars", "list", "--json").stdout)
    assert [v["name"] for v in listed] == ["NODE_OPTIONS"]


def test_export_scope_and_a_held_value_through_ql3_cluster_vars(cluster: Cluster) -> None:
    """``vars export`` (plain values as NAME=value lines; secret ones for an admin token with
    ``--include-secrets`` and a confirmation, logged by control), ``vars pools`` (the scope
    alone, widened back with ``--all-pools``) and ``vars set --add`` of a held value."""
    url = cluster.start_control("c1").url or ""
    tokens = {scope: cluster.token(scope) for scope in ("admin", "operator", "viewer")}
    op, viewer, admin = tokens["operator"], tokens["viewer"], tokens["admin"]
    cli(cluster, url, op, "vars", "set", "JD_COOKIE", "--remark", "账号一", stdin=COOKIES[0])
    again = cli(cluster, url, op, "vars", "set", "JD_COOKIE", "--add", stdin=COOKIES[0])
    assert again.stdout == "unchanged: variable JD_COOKIE already holds this value as #1\n"
    with cluster.api(url, admin) as api:
        answer = api.post("/v1/vars/JD_UA", json={"value": "Mozilla/5.0 京东", "secret": False,
                                                  "remark": "京东账号一"})
        assert answer.status_code == 200, answer.text

    assert cli(cluster, url, op, "vars", "pools", "JD_UA", "--pool", "jd", "--pool",
               "jd-backup").stdout == "variable JD_UA: pools jd,jd-backup\n"
    assert cli(cluster, url, op, "vars", "pools", "JD_UA", "--all-pools"
               ).stdout == "variable JD_UA: all pools\n"
    neither = cli(cluster, url, op, "vars", "pools", "JD_UA", code=None)
    assert neither.returncode == 2 and "--all-pools" in neither.stderr
    denied = cli(cluster, url, viewer, "vars", "pools", "JD_UA", "--all-pools", code=None)
    assert denied.returncode != 0 and "operator" in denied.stderr

    plain = '# 京东账号一\nJD_UA="Mozilla/5.0 京东"\n'
    assert cli(cluster, url, viewer, "vars", "export").stdout == plain
    refused = cli(cluster, url, op, "vars", "export", "--include-secrets", "--yes", code=None)
    assert refused.returncode != 0 and "admin" in refused.stderr and refused.stdout == ""
    unconfirmed = cli(cluster, url, admin, "vars", "export", "--include-secrets", code=None)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
    assert unconfirmed.stdout == ""
    everything = cli(cluster, url, admin, "vars", "export", "--include-secrets", "--yes")
    assert everything.stdout == f'# 账号一\nJD_COOKIE="{COOKIES[0]}"\n' + plain

    logs = "".join(p.log() for p in cluster.procs)
    assert "variables exported with secret values by token" in logs
    assert COOKIES[0] not in logs
