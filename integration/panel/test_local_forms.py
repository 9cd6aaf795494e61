"""The local panel's forms at their edges (docs/panel.md "Large fields", "Task form"): fields
larger than Starlette's 1 MiB default, a stale task edit, the new task's zone, a run the
forbid policy refuses, shell operators in a command; over a real `ql3 local serve` and a
real `ql3 local web`, through HTTP.
"""

from __future__ import annotations

import html

import httpx
import pytest
from panel_harness import start_web
from test_local_pages import FORM, Signed
from test_local_pages import signed as _signed_fixture

from harness import Ql3

pytestmark = pytest.mark.integration
signed = _signed_fixture
ZONE = "America/Sao_Paulo"


@pytest.fixture
def zoned(ql3: Ql3) -> Ql3:
    """``ql3`` whose serve, web and CLI run with TZ set to :data:`ZONE`."""
    ql3.env["TZ"] = ZONE
    return ql3


def test_a_3mb_script_is_refused_in_the_viewers_language_with_the_text_kept(
        signed: Signed) -> None:
    """Over Starlette's 1 MiB field default and the scripts folder's 128 KiB: the editor
    says the limit, in Chinese, and shows the whole text again; nothing is written."""
    content = "var a = '" + "混" * (1024 * 1024) + "';\n"  # 3 MiB of UTF-8
    got = signed.post("/scripts/save", {"path": "big.js", "content": content,
                                        "version": "", "new": "1"})
    assert got.status_code == 413, got.text[:300]
    assert "文件超过 128 KiB" in got.text
    assert content.strip() in html.unescape(got.text)
    assert "big.js" not in signed.http.get("/scripts").text


def test_a_1_5mb_command_is_refused_beside_the_form_with_the_input_kept(
        signed: Signed) -> None:
    """Over the launcher's 256 KiB budget: refused beside the field before it is split
    (shlex would take minutes on it)."""
    command = "echo " + "x" * (1536 * 1024)
    got = signed.post("/tasks/new", {**FORM, "command": command})
    assert got.status_code == 400, got.text[:300]
    assert "超过了系统启动进程的上限" in got.text
    assert command in got.text
    assert signed.ql3.run("local", "task", "show", "京东签到", check=False).returncode == 2


def test_a_field_over_the_panels_32mib_gets_a_worded_413_not_a_500(signed: Signed) -> None:
    got = signed.post("/tasks/new", {**FORM, "command": "echo " + "x" * (33 * 1024 * 1024)})
    assert got.status_code == 413
    assert "超过 32 MiB" in got.text


def test_the_new_task_form_starts_in_the_zone_the_cli_would_use(zoned: Ql3) -> None:
    serve = zoned.start_serve()
    try:
        web = start_web(zoned)
        try:
            with httpx.Client(base_url=web.base, timeout=30) as http:
                http.get(web.link)
                page = http.get("/tasks/new").text
        finally:
            web.stop()
        zoned.run("local", "task", "add", "cli-zone", "--schedule", "0 8 * * *", "--",
                  "true")
        cli = zoned.json("local", "task", "show", "cli-zone")["timezone"]
    finally:
        zoned.stop_serve(serve)
    assert cli == ZONE
    assert f'name="timezone" value="{ZONE}"' in page


def test_run_refused_by_the_forbid_policy_says_why_in_the_viewers_language(
        signed: Signed) -> None:
    signed.ql3.run("local", "task", "add", "长任务", "--schedule", "0 8 * * *",
                   "--concurrency", "forbid", "--", "sleep", "30")
    first = signed.post("/tasks/长任务/run", {})
    assert first.status_code == 303
    again = signed.post("/tasks/长任务/run", {})
    assert again.status_code == 409
    assert "并发策略为“禁止”" in again.text and "请求被拒绝" not in again.text
    signed.ql3.run("local", "cancel", "长任务#1", check=False)


def test_a_step_over_its_field_is_refused_and_the_web_words_the_clis_reasons(
        signed: Signed) -> None:
    """``*/70`` seconds once ran every minute; ``0 0 30 2 *`` is worded in the web as
    specifically as the CLI says it (shared/cron.py), not as "not a valid cron"."""
    cli = signed.ql3.run("local", "task", "add", "快", "--schedule", "*/70 * * * * *",
                         "--", "true", check=False)
    assert cli.returncode == 2 and "step over the field's 60 values" in cli.stderr
    step = signed.post("/tasks/new", {**FORM, "schedule": "*/70 * * * * *"})
    assert step.status_code == 400 and "“秒”一段无效" in step.text
    never = signed.post("/tasks/new", {**FORM, "schedule": "0 0 30 2 *"})
    assert never.status_code == 400 and "永远不会落在真实的日期上" in never.text
    assert "不是有效的 cron 表达式" not in never.text
    assert signed.ql3.run("local", "task", "show", "京东签到", check=False).returncode == 2


def test_a_stale_task_form_is_refused_and_does_not_undo_the_other_edit(
        signed: Signed) -> None:
    """Two editors: the second, opened before the first saved, changes only the command;
    the owner refuses it (changed meanwhile, in Chinese), the input is shown again and
    the first edit's schedule stays."""
    assert signed.post("/tasks/new", FORM).status_code == 303
    opened = signed.http.get("/tasks/京东签到/edit").text
    version = opened.split('name="version" value="', 1)[1].split('"', 1)[0]
    signed.ql3.run("local", "task", "edit", "京东签到", "--schedule", "0 9 * * *")
    stale = signed.post("/tasks/京东签到/edit", {**FORM, "version": version,
                                                "command": "echo 改过的命令"})
    assert stale.status_code == 409, stale.text[:300]
    assert "任务在此期间已被更改" in stale.text and "echo 改过的命令" in stale.text
    task = signed.ql3.json("local", "task", "show", "京东签到")
    assert task["schedule"] == "0 9 * * *" and task["argv"] == ["echo", "签到成功"]
    fresh = signed.http.get("/tasks/京东签到/edit").text
    version = fresh.split('name="version" value="', 1)[1].split('"', 1)[0]
    saved = signed.post("/tasks/京东签到/edit", {**FORM, "schedule": "0 9 * * *",
                                                "version": version,
                                                "command": "echo 改过的命令"})
    assert saved.status_code == 303
    assert signed.ql3.json("local", "task", "show", "京东签到")["argv"] == ["echo", "改过的命令"]


def test_shell_operators_in_a_command_are_refused_unless_through_sh_c(
        signed: Signed) -> None:
    """``echo 京东签到成功 && sleep 3`` once printed ``&&`` and succeeded: refused by
    `ql3 local task add`/`edit` (``--no-check`` adds it anyway) and by the form, in the
    viewer's language; ``sh -c '…'`` is taken."""
    words = ["echo", "京东签到成功", "&&", "sleep", "3"]
    cli = signed.ql3.run("local", "task", "add", "签到", "--schedule", "0 8 * * *", "--",
                         *words, check=False)
    assert cli.returncode == 2 and "'&&' is a shell operator" in cli.stderr
    assert "sh -c" in cli.stderr and "--no-check" in cli.stderr
    signed.ql3.run("local", "task", "add", "签到", "--schedule", "0 8 * * *", "--", "true")
    edit = signed.ql3.run("local", "task", "edit", "签到", "--", "echo", "a", "|", "wc",
                          check=False)
    assert edit.returncode == 2 and "'|' is a shell operator" in edit.stderr
    form = signed.post("/tasks/new", {**FORM, "command": " ".join(words)})
    assert form.status_code == 400 and "命令里有 shell 运算符" in form.text
    assert signed.ql3.run("local", "task", "show", "京东签到", check=False).returncode == 2
    shell = signed.post("/tasks/new", {**FORM, "command": "sh -c 'echo 成功 && echo 完成'"})
    assert shell.status_code == 303
    signed.ql3.run("local", "task", "add", "原样", "--schedule", "0 8 * * *", "--no-check",
                   "--", *words)
