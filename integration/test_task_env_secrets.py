"""Issue 12 items 7-8 through the real `ql3`: secrets never printed, a task's own PATH."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import QL3, Ql3

pytestmark = pytest.mark.integration

LITERAL = "lit-Zq81-SECRET"
GLOBAL = "glob-Wx27-SECRET"
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
VENV_BIN = str(Path(sys.executable).parent)


def ql3_input(ql3: Ql3, data: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `ql3` with ``data`` on stdin (how a user pipes a secret in)."""
    return subprocess.run([QL3, *args], env=ql3.env, input=data, capture_output=True,
                          text=True, timeout=60, check=False)


def _everything_printed(ql3: Ql3, run_id: str) -> str:
    """Every view of the task and run a user can ask for, text and JSON."""
    out = []
    for args in (("task", "show", "echo"), ("task", "list"), ("runs",), ("inspect", run_id),
                 ("vars", "list"), ("settings", "show")):
        out.append(ql3.run("local", *args).stdout)
        out.append(ql3.run("local", *args, "--json").stdout)
    return "\n".join(out)


def test_secret_values_reach_the_task_but_no_view_event_error_or_serve_log(ql3: Ql3) -> None:
    serve = ql3.start_serve()  # every command below goes through serve's socket
    try:
        assert ql3_input(ql3, GLOBAL + "\n", "local", "vars", "set", "TOKEN").returncode == 0
        added = ql3_input(
            ql3, LITERAL, "local", "task", "add", "echo", "--schedule", "@once",
            "--env", "PLAIN=visible-value", "--secret-env", "LIT", "--secret-env", "REF=@TOKEN",
            "--", "sh", "-c", 'echo "lit=$LIT ref=$REF"; exit 3')
        assert added.returncode == 0, added.stderr
        run = ql3.json("local", "run", "echo", "--wait", check=False)
        log = ql3.run("local", "logs", run["id"]).stdout
        printed = _everything_printed(ql3, run["id"])
        show = ql3.run("local", "task", "show", "echo").stdout
        clash = ql3_input(ql3, "other-SECRET", "local", "task", "add", "e2", "--schedule",
                          "@once", "--env", "LIT=x", "--secret-env", "LIT", "--", "true")
    finally:
        assert ql3.stop_serve(serve) == 0
    # the task gets both values: it printed each exactly, and the log masks them
    # (docs/operations.md §9); without the values it would print "lit= ref="
    assert log == "lit=*** ref=***\n"
    assert run["status"] == "failed"
    assert "PLAIN=visible-value" in show  # plain --env stays visible
    assert "LIT=********" in show and "REF=@TOKEN" in show
    assert clash.returncode == 2 and "SECRET" not in clash.stderr
    for secret in (LITERAL, GLOBAL):
        assert secret not in printed
        assert secret not in ql3.serve_log()
    shown = ql3.json("local", "task", "show", "echo")
    assert shown["secret_env"] == {"LIT": "********", "REF": "@TOKEN"}
    assert all(LITERAL not in json.dumps(e) for e in shown["events"])


def test_a_secret_on_argv_is_refused_without_echoing_it_and_nothing_is_stored(ql3: Ql3) -> None:
    result = ql3.run("local", "task", "add", "t", "--schedule", "@once",
                     "--secret-env", f"API={LITERAL}", "--", "true", check=False)
    assert result.returncode == 2
    assert LITERAL not in result.stderr + result.stdout
    assert "never taken from the command line" in result.stderr
    assert ql3.json("local", "task", "list") == []
    usage = ql3.run("local", "vars", "set", "A", LITERAL, check=False)  # no VALUE argument
    assert usage.returncode == 2 and ql3.json("local", "vars", "list") == []


def test_a_reference_to_a_missing_variable_is_refused_at_add(ql3: Ql3) -> None:
    result = ql3.run("local", "task", "add", "t", "--schedule", "@once",
                     "--secret-env", "API=@NOPE", "--", "true", check=False)
    assert result.returncode == 2 and "NOPE" in result.stderr
    assert ql3.json("local", "task", "list") == []


def test_vars_set_from_file_rm_and_rm_refused_while_a_task_refers_to_it(
    ql3: Ql3, tmp_path: Path
) -> None:
    value_file = tmp_path / "token"
    value_file.write_text(GLOBAL + "\n")
    assert ql3.run("local", "vars", "set", "TOKEN", "--from-file", str(value_file)).stdout \
        == "set variable TOKEN\n"
    ql3.run("local", "task", "add", "t", "--schedule", "@once", "--secret-env", "T=@TOKEN",
            "--", "true")
    refused = ql3.run("local", "vars", "rm", "TOKEN", check=False)
    assert refused.returncode == 1 and "t" in refused.stderr and GLOBAL not in refused.stderr
    ql3.run("local", "task", "rm", "t")
    assert ql3.run("local", "vars", "rm", "TOKEN").stdout == "removed variable TOKEN\n"
    assert ql3.json("local", "vars", "list") == []
    missing = ql3.run("local", "vars", "rm", "TOKEN", check=False)
    assert missing.returncode != 0 and "TOKEN" in missing.stderr


def _run_log(ql3: Ql3, name: str, *env: str) -> str:
    ql3.run("local", "task", "add", name, "--schedule", "@once", *env, "--",
            "sh", "-c", 'echo "$PATH"; command -v python3 || echo none')
    run = ql3.json("local", "run", name, "--wait")
    return str(ql3.run("local", "logs", run["id"]).stdout)


def test_a_tasks_python3_does_not_resolve_into_the_runtimes_venv(ql3: Ql3) -> None:
    ql3.env["PATH"] = f"{VENV_BIN}:{ql3.env.get('PATH', '/usr/bin:/bin')}"
    assert ql3.run("local", "--help").returncode == 0  # ql3 itself runs from the venv
    path, python = _run_log(ql3, "which").splitlines()
    assert path == SYSTEMD_PATH
    assert not python.startswith(VENV_BIN), python


def test_the_data_directory_path_setting_applies_and_a_tasks_own_path_wins(
    ql3: Ql3, tmp_path: Path
) -> None:
    ql3.run("local", "settings", "set", "task_path", "/bin:/usr/bin")
    assert _run_log(ql3, "dirwide").splitlines()[0] == "/bin:/usr/bin"
    assert _run_log(ql3, "own", "--env", "PATH=/usr/bin:/bin").splitlines()[0] == "/usr/bin:/bin"
    bad = ql3.run("local", "settings", "set", "task_path", "relative:/bin", check=False)
    assert bad.returncode == 2 and "task_path" in bad.stderr
    ql3.run("local", "settings", "unset", "task_path")
    assert _run_log(ql3, "back").splitlines()[0] == SYSTEMD_PATH
