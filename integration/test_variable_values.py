"""Global variables as Qinglong users keep them (环境变量), through the real `ql3 local`.

A name holds several values in order (multi-account ``JD_COOKIE``), each with a remark and an
enabled flag; a task receives the enabled ones joined with ``&``; disabling keeps a value;
a value over 128 KiB is refused; a secret value is never printed, a ``--plain`` one is shown
by ``vars show NAME --reveal`` (DESIGN.md §3.3).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import Ql3
from test_task_env_secrets import ql3_input

pytestmark = pytest.mark.integration

COOKIES = ("pt_key=AAAsecret1;pt_pin=甲;", "pt_key=BBBsecret2;pt_pin=乙;",
           "pt_key=CCCsecret3;pt_pin=丙;")


def _run_output(ql3: Ql3, task: str) -> str:
    ql3.run("local", "run", task)
    run = ql3.json("local", "runs", "--task", task)[0]
    return str(ql3.run("local", "logs", run["id"]).stdout)


def test_several_values_with_remarks_join_enabled_ones_with_ampersand(
    ql3: Ql3, tmp_path: Path
) -> None:
    for n, (cookie, remark) in enumerate(zip(COOKIES, ("账号一", "账号二", "账号三"),
                                             strict=True)):
        extra = ("--add",) if n else ()
        done = ql3_input(ql3, cookie, "local", "vars", "set", "JD_COOKIE", *extra,
                         "--remark", remark)
        assert done.returncode == 0, done.stderr
        assert (f"value #{n + 1}" in done.stdout) == bool(n)
    # what the task receives, written where the log's masking of secrets does not reach
    seen_file = tmp_path / "seen.txt"
    ql3.run("local", "task", "add", "jd_sign", "--schedule", "@once", "--",
            "sh", "-c", f'printf "[%s]\\n" "$JD_COOKIE" > {seen_file}; echo "[$JD_COOKIE]"')

    def seen(task: str) -> str:
        printed = _run_output(ql3, task)
        assert not any(c in printed for c in COOKIES)  # a secret's values: *** in the log
        return seen_file.read_text()

    assert f"[{'&'.join(COOKIES)}]" in seen("jd_sign")

    off = ql3.run("local", "vars", "disable", "JD_COOKIE", "--index", "2")
    assert "value #2 disabled (kept)" in off.stdout
    assert f"[{COOKIES[0]}&{COOKIES[2]}]" in seen("jd_sign")

    listed = ql3.run("local", "vars", "list").stdout
    assert "2 of 3 on" in listed and "账号二" in listed
    assert [(v["index"], v["remark"], v["enabled"])
            for v in ql3.json("local", "vars", "list")[0]["values"]] == [
        (1, "账号一", True), (2, "账号二", False), (3, "账号三", True)]

    ql3.run("local", "vars", "enable", "JD_COOKIE", "--index", "2")
    ql3.run("local", "vars", "rm", "JD_COOKIE", "--index", "1")
    assert f"[{COOKIES[1]}&{COOKIES[2]}]" in seen("jd_sign")

    ql3.run("local", "vars", "disable", "JD_COOKIE")  # every value: the variable is unset
    assert "[]" in seen("jd_sign")
    assert [v["enabled"] for v in ql3.json("local", "vars", "show", "JD_COOKIE")["values"]] \
        == [False, False]

    printed = "\n".join(
        ql3.run("local", *args, check=False).stdout + ql3.run("local", *args, check=False).stderr
        for args in (("vars", "list"), ("vars", "list", "--json"),
                     ("vars", "show", "JD_COOKIE"), ("vars", "show", "JD_COOKIE", "--reveal"),
                     ("task", "show", "jd_sign"), ("inspect", "jd_sign@last")))
    assert not any(secret in printed for secret in ("AAAsecret1", "BBBsecret2", "CCCsecret3"))


def test_reveal_prints_a_plain_value_and_refuses_a_secret_one(ql3: Ql3) -> None:
    assert ql3_input(ql3, "zh_CN.UTF-8", "local", "vars", "set", "LANG_HINT",
                     "--plain").returncode == 0
    shown = ql3.json("local", "vars", "show", "LANG_HINT", "--reveal")
    assert shown["secret"] is False and shown["values"][0]["value"] == "zh_CN.UTF-8"
    assert "value" not in ql3.json("local", "vars", "show", "LANG_HINT")["values"][0]

    assert ql3_input(ql3, "s3cr3t-token", "local", "vars", "set", "PUSH_KEY").returncode == 0
    refused = ql3.run("local", "vars", "show", "PUSH_KEY", "--reveal", check=False)
    assert refused.returncode != 0 and "secret" in refused.stderr
    assert "s3cr3t-token" not in refused.stdout + refused.stderr


def test_a_value_over_128_kib_is_refused_and_nothing_is_lost(ql3: Ql3) -> None:
    assert ql3_input(ql3, "keep-me", "local", "vars", "set", "BIG").returncode == 0
    huge = "x" * (128 * 1024 + 1)
    refused = ql3_input(ql3, huge, "local", "vars", "set", "BIG", "--add")
    assert refused.returncode != 0 and "x" * 64 not in refused.stderr
    assert len(ql3.json("local", "vars", "show", "BIG")["values"]) == 1
    # within one value's limit, but the variables together exceed what a task can start with
    big = "y" * (100 * 1024)
    refused = ql3_input(ql3, big, "local", "vars", "set", "BIG", "--add")
    assert refused.returncode != 0 and "limited to" in refused.stderr
    assert json.loads(ql3.run("local", "vars", "list", "--json").stdout)[0]["enabled"] == 1


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "QL3_DATA_DIR"])
def test_a_name_the_runtime_or_the_loader_owns_is_refused_and_tasks_keep_running(
    ql3: Ql3, name: str
) -> None:
    refused = ql3_input(ql3, "x", "local", "vars", "set", name)
    assert refused.returncode == 2 and refused.stdout == ""
    assert name in refused.stderr and "global variable" in refused.stderr
    if name == "PATH":  # the refusal says where a PATH belongs
        assert "--env PATH=" in refused.stderr and "task_path" in refused.stderr
    assert ql3.json("local", "vars", "list") == []
    ql3.run("local", "task", "add", "签到", "--schedule", "@once", "--", "sh", "-c", "echo ok")
    assert _run_output(ql3, "签到") == "ok\n"


def test_names_qinglong_users_set_themselves_stay_settable(ql3: Ql3) -> None:
    for name in ("NODE_OPTIONS", "HOME_TOWN", "PATH_PREFIX", "MY_LD_FLAGS"):
        assert ql3_input(ql3, "v", "local", "vars", "set", name).returncode == 0, name
    assert sorted(v["name"] for v in ql3.json("local", "vars", "list")) == [
        "HOME_TOWN", "MY_LD_FLAGS", "NODE_OPTIONS", "PATH_PREFIX"]


def test_one_name_rule_refuses_a_5000_character_name_before_storing_anything(
    ql3: Ql3,
) -> None:
    """`vars set` takes the rule both profiles share (shared/variable_limits.py): 1-128 of
    ``[A-Za-z0-9_]``, not starting with a digit; a longer name is refused with the rule and
    without the name echoed, and nothing is stored. 128 characters are fine."""
    long_name = "A" * 5000
    refused = ql3_input(ql3, "value-1", "local", "vars", "set", long_name)
    assert refused.returncode != 0
    assert "1-128" in refused.stderr and long_name not in refused.stderr
    assert ql3.json("local", "vars", "list") == []
    fine = ql3_input(ql3, "value-1", "local", "vars", "set", "B" * 128)
    assert fine.returncode == 0, fine.stderr
    assert [v["name"] for v in ql3.json("local", "vars", "list")] == ["B" * 128]


def test_adding_a_value_the_variable_already_holds_does_not_add_it_again(ql3: Ql3) -> None:
    """`vars set --add` of a value already there (an import read back) leaves the values as
    they were and says so; the task still gets each value once."""
    for cookie in COOKIES[:2]:
        assert ql3_input(ql3, cookie, "local", "vars", "set", "JD_COOKIE", "--add",
                         "--plain").returncode == 0
    again = ql3_input(ql3, COOKIES[1], "local", "vars", "set", "JD_COOKIE", "--add")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("unchanged variable JD_COOKIE value #2")
    shown = ql3.json("local", "vars", "show", "JD_COOKIE", "--reveal")
    assert [v["value"] for v in shown["values"]] == list(COOKIES[:2])
