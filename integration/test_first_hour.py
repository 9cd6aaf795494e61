"""A new user's first hour, each stumble fixed (docs/operations.md "First hour"), through the
real ``ql3`` at COLUMNS=80: help without the cluster's libraries, a value typed where stdin is
read, a missing control URL, a forbid refusal naming the run in progress, and a script path
checked when the task is added."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness import QL3, Ql3, wait_for

pytestmark = pytest.mark.integration


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QL3_")}
    env.pop("PYTHONPATH", None)
    env.update(COLUMNS="80", TZ="Asia/Shanghai", **extra)
    return env


def test_help_and_cluster_commands_without_the_cluster_libraries(tmp_path: Path) -> None:
    """After scripts/demo.sh (local profile and panel, no cluster), httpx is absent: `ql3
    --help` and a bare `ql3` print help, and `ql3 cluster …` says in one line what to install."""
    shadow = tmp_path / "shadow"  # an install without httpx: not found, importing it fails
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text("import sys\nsys.modules['httpx'] = None\n")
    env = _env(PYTHONPATH=str(shadow))
    for args, code in ((["--help"], 0), ([], 2)):
        out = subprocess.run([QL3, *args], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
        shown = out.stdout + out.stderr  # bare `ql3` prints its help on stderr, exit 2
        assert out.returncode == code, shown
        assert "Traceback" not in shown and "Commands:" in shown, shown
        assert "local" in shown and "cluster" in shown  # listed, saying it is not installed
    for args in (["cluster", "task", "list"], ["cluster", "--help"]):
        out = subprocess.run([QL3, *args], env=env, capture_output=True, text=True,
                             timeout=60, check=False)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "install `qinglong-cluster`" in lines[0], lines


def test_vars_set_with_a_value_explains_stdin_and_never_shows_it(ql3: Ql3) -> None:
    out = ql3.run("local", "vars", "set", "JD_COOKIE=pt_key-SECRET", check=False)
    assert out.returncode == 2
    assert "stdin" in out.stderr and "ql3 local vars set JD_COOKIE" in out.stderr
    assert "pt_key-SECRET" not in out.stderr + out.stdout


def test_a_missing_control_url_names_the_variable_too() -> None:
    out = subprocess.run([QL3, "cluster", "task", "list"], env=_env(), capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert "Missing option '--control-url'" in out.stderr and "QL3_CONTROL_URL" in out.stderr


def test_a_forbid_refusal_and_serves_log_name_the_run(ql3: Ql3, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    ql3.run("local", "task", "add", "京东签到", "--schedule", "@once", "--", "sh", "-c",
            f"echo 签到中; while [ ! -e {gate} ]; do sleep 0.1; done")
    serve = ql3.start_serve()
    try:
        ql3.run("local", "run", "京东签到")
        assert wait_for(lambda: ql3.json("local", "inspect", "京东签到#1")["status"]
                        == "running", 15)
        refused = ql3.run("local", "run", "京东签到", check=False)
        assert refused.returncode != 0
        assert "京东签到#1 is running" in refused.stderr, refused.stderr
        assert "forbid" in refused.stderr and "ql3 local cancel 京东签到#1" in refused.stderr
        gate.touch()
        assert wait_for(lambda: "京东签到#1: attempt 1 succeeded" in ql3.serve_log(), 15)
    finally:
        gate.touch()
        assert ql3.stop_serve(serve) == 0
    # serve's log names runs as people type them, and says when each attempt starts
    logged = ql3.serve_log()
    assert "京东签到#1: attempt 1 started" in logged, logged
    assert "京东签到#1: attempt 1 succeeded, run succeeded" in logged, logged


def test_a_script_path_is_checked_when_the_task_is_added(ql3: Ql3, tmp_path: Path) -> None:
    """A relative script path is added with a warning naming where it will be looked up; a
    missing absolute one is refused unless --no-check; the run-time error names the
    working directory the relative path was looked up in."""
    added = ql3.run("local", "task", "add", "fail", "--schedule", "@once", "--",
                    "examples/fail.sh")
    assert "relative path" in added.stderr and "working directory" in added.stderr
    missing = tmp_path / "nope" / "签到.sh"
    refused = ql3.run("local", "task", "add", "签到", "--schedule", "@once", "--",
                      "python3", str(missing), check=False)
    assert refused.returncode == 2 and f"{missing} does not exist" in refused.stderr
    assert "--no-check" in refused.stderr
    assert "签到" not in ql3.run("local", "task", "list").stdout  # nothing was added
    ql3.run("local", "task", "add", "签到", "--schedule", "@once", "--no-check", "--",
            "python3", str(missing))
    edit = ql3.run("local", "task", "edit", "签到", "--", str(missing), check=False)
    assert edit.returncode == 2 and "does not exist" in edit.stderr

    ran = ql3.run("local", "run", "fail", check=False)
    assert ran.returncode != 0
    log = ql3.run("local", "logs", "fail@last").stdout
    assert "cannot execute 'examples/fail.sh'" in log and "working directory /" in log, log


def test_every_default_view_fits_80_screen_columns_with_chinese_names(ql3: Ql3) -> None:
    """Screen columns, not characters: 京 takes two. Every line of the default views walked
    here stays within 80 columns (``--wide`` shows everything), but a run's status line."""
    from qinglong.shared.display import text_width

    ql3.env.update(COLUMNS="80", TZ="Asia/Shanghai")
    long_name = "京东签到每日领京豆" * 3 + "-1"  # 56 characters, 110 columns
    ql3.run("local", "task", "add", long_name, "--schedule", "0 8 * * *", "--timezone",
            "Europe/Berlin", "--label", "平台=京东", "--label", "账号=主号", "--", "sh", "-c",
            "echo 签到成功，获得京豆 10 个；明天继续签到")
    ql3.run("local", "task", "add", "每日 签到-2", "--schedule", "@once", "--", "true")
    ql3.run("local", "run", long_name, check=False)
    walked = [
        ("local", "task", "list"), ("local", "task", "list", "--label", "平台=京东"),
        ("local", "task", "show", long_name), ("local", "task", "next", long_name),
        ("local", "runs"), ("local", "inspect", f"{long_name}@last"),
        ("local", "vars", "list"), ("local", "status"), ("local", "settings", "show"),
    ]
    for args in walked:
        out = ql3.run(*args).stdout
        # a run's status line is a message, printed whole at any width (shared/display.py)
        wide = [line for line in out.splitlines()
                if text_width(line) > 80 and not line.startswith(f"run {long_name}#")]
        assert wide == [], (args, wide)
    assert long_name in ql3.run("local", "task", "list", "--wide").stdout


def test_json_events_carry_detail_as_an_object(ql3: Ql3) -> None:
    """``--json`` events carry ``detail`` as a JSON object, not JSON text inside JSON, in
    ``inspect`` and ``task show``; the default views still read it as ``key=value``."""
    ql3.run("local", "task", "add", "京东签到", "--schedule", "@once", "--", "sh", "-c",
            "echo 签到失败; exit 3")
    ql3.run("local", "task", "edit", "京东签到", "--timeout", "30")
    ql3.run("local", "run", "京东签到", check=False)
    events = ql3.json("local", "inspect", "京东签到#1")["events"]
    details = [e["detail"] for e in events if e["detail"] is not None]
    assert details and all(isinstance(d, dict) for d in details), events
    assert any(d.get("exit_code") == 3 for d in details), events
    shown = ql3.json("local", "task", "show", "京东签到")["events"]
    [edited] = [e["detail"] for e in shown if e["kind"] == "task_edited"]
    assert isinstance(edited, dict) and "timeout_s" in edited["changed"], shown
    assert "exit_code=3" in ql3.run("local", "inspect", "京东签到#1").stdout
    assert "timeout" in ql3.run("local", "task", "show", "京东签到").stdout


def test_status_and_settings_fit_80_columns_with_long_paths() -> None:
    """``status`` and ``settings show`` keep every line within 80 columns: a long path or
    value goes whole on its own line under its label, so it can still be copied. A value
    wider than 80 columns by itself stays whole on its own line (never cut): the one line
    allowed past 80. ``--wide`` keeps label and value on one line."""
    from qinglong.shared.display import text_width

    base = Path(tempfile.mkdtemp(prefix="ql3-"))  # a short base: the path's width is known
    try:
        data = base / "青龙数据目录" / ("d" * max(1, 70 - len(str(base)) - 14))
        assert 64 <= text_width(str(data)) <= 76  # alone it fits; behind its label it does not
        ql3 = Ql3(data)
        ql3.env.update(COLUMNS="80", TZ="Asia/Shanghai")
        ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
        path = ":".join(["/opt/青龙/脚本/bin"] * 4)  # 60+ columns
        ql3.run("local", "settings", "set", "task_path", path)
        notify = "python3 /opt/青龙/通知/" + "很长的通知脚本名" * 5 + ".py --渠道 bark"
        assert text_width(notify) > 80
        ql3.run("local", "settings", "set", "notify_command", notify)
        notify = shlex.join(shlex.split(notify))  # shown shell-quoted
        for args, whole in ((("local", "status"), str(data)),
                            (("local", "settings", "show"), path)):
            lines = ql3.run(*args).stdout.splitlines()
            wide = [line for line in lines if text_width(line) > 80 and line != notify]
            assert wide == [], (args, wide)
            assert f"  {whole}" in lines, (args, lines)  # whole, on its own line: copyable
        shown = ql3.run("local", "settings", "show").stdout.splitlines()
        assert notify in shown and "task_path:" in [line.strip() for line in shown], shown
        assert f"    data dir: {data}" in ql3.run("local", "status", "--wide").stdout
        assert f"       task_path: {path}" in ql3.run(
            "local", "settings", "show", "--wide").stdout
    finally:
        shutil.rmtree(base, ignore_errors=True)
