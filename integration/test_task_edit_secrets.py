"""Issue 12 item 7 through the real `ql3`: `task edit --secret-env / --unset-secret-env`.

A secret set by an edit reaches the next run; its value comes from stdin (or a global
variable by ``@VAR``), never argv; the edit's task event names the secret variables changed,
never their values; a plain ``--env`` of a name that is a secret is refused. Run once with
``serve`` owning the data directory (the edit goes through its socket) and once without.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from harness import QL3, Ql3

pytestmark = pytest.mark.integration

LITERAL = "edit-Lq93-SECRET"
GLOBAL = "edit-Gv58-SECRET"
SECOND = "edit-Ns40-SECRET"


def ql3_input(ql3: Ql3, data: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `ql3` with ``data`` on stdin (how a user pipes a secret in)."""
    return subprocess.run([QL3, *args], env=ql3.env, input=data, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.fixture(params=["with serve", "without serve"])
def owner(request: pytest.FixtureRequest, ql3: Ql3) -> Iterator[str]:
    serve = ql3.start_serve() if request.param == "with serve" else None
    try:
        yield request.param
    finally:
        if serve is not None:
            assert ql3.stop_serve(serve) == 0


def _spaced(value: str) -> str:
    """How the task prints a value transformed (not the exact bytes, so not masked)."""
    return value.replace("-", " - ")


def _run_output(ql3: Ql3) -> str:
    run = ql3.json("local", "run", "t", "--wait")
    return str(ql3.run("local", "logs", run["id"]).stdout)


def test_edit_sets_and_unsets_secrets_named_in_events_never_valued(
    ql3: Ql3, owner: str
) -> None:
    assert ql3_input(ql3, GLOBAL, "local", "vars", "set", "TOKEN").returncode == 0
    ql3.run("local", "task", "add", "t", "--schedule", "@once", "--env", "PLAIN=visible",
            "--", "sh", "-c", 'echo "a=$A b=$B plain=$PLAIN"; '
            'echo "a spaced: $(printf %s "$A" | sed "s/-/ - /g")"')
    task_id = ql3.json("local", "task", "show", "t")["id"]
    assert _run_output(ql3) == "a= b= plain=visible\na spaced: \n"

    edited = ql3_input(ql3, LITERAL + "\n", "local", "task", "edit", "t",
                       "--secret-env", "A", "--secret-env", "B=@TOKEN")
    assert (edited.returncode, edited.stdout) == (0, "edited task t: secret_env\n"), edited.stderr
    # the next run has them: it printed each exactly, masked in the log (operations.md §9)
    assert _run_output(ql3) == f"a=*** b=*** plain=visible\na spaced: {_spaced(LITERAL)}\n"

    # a plain --env of a name that is a secret: refused, nothing changes (exit 2)
    clash = ql3.run("local", "task", "edit", "t", "--env", "A=plain", check=False)
    assert clash.returncode == 2 and "A is a secret variable" in clash.stderr, clash.stderr
    # a value on argv: refused without echoing it
    argv = ql3.run("local", "task", "edit", "t", "--secret-env", f"A={SECOND}", check=False)
    assert argv.returncode == 2 and SECOND not in argv.stderr + argv.stdout
    assert "never taken from the command line" in argv.stderr

    # replace A's value, unset B; then a plain variable turned secret in one edit
    replaced = ql3_input(ql3, SECOND, "local", "task", "edit", "t", "--secret-env", "A",
                         "--unset-secret-env", "B")
    assert replaced.returncode == 0, replaced.stderr
    assert _run_output(ql3) == f"a=*** b= plain=visible\na spaced: {_spaced(SECOND)}\n"
    moved = ql3_input(ql3, "now-hidden", "local", "task", "edit", "t", "--unset-env", "PLAIN",
                      "--secret-env", "PLAIN")
    assert moved.stdout == "edited task t: env, secret_env\n", moved.stderr
    missing = ql3.run("local", "task", "edit", "t", "--unset-secret-env", "B", check=False)
    assert missing.returncode == 2 and "no secret variable B" in missing.stderr
    same = ql3.run("local", "task", "edit", "t", "--unset-secret-env", "A")
    assert same.stdout == "edited task t: secret_env\n"

    shown = ql3.json("local", "task", "show", "t")
    assert shown["id"] == task_id  # same task, same history
    assert shown["secret_env"] == {"PLAIN": "********"} and "PLAIN" not in shown["env"]
    edits = [e["detail"] for e in shown["events"] if e["kind"] == "task_edited"]
    edits.reverse()  # newest first -> in the order made
    assert [(e["changed"], e.get("secret_env_set"), e.get("secret_env_unset")) for e in edits] \
        == [(["secret_env"], ["A", "B"], []),
            (["secret_env"], ["A"], ["B"]),
            (["env", "secret_env"], ["PLAIN"], []),
            (["secret_env"], [], ["A"])]
    text = ql3.run("local", "task", "show", "t").stdout
    assert "edited: secret_env (set A, set B)" in text
    assert "edited: secret_env (set A, unset B)" in text
    assert "PLAIN=********" in text
    everything = "\n".join([text, json.dumps(shown), ql3.run("local", "task", "list").stdout,
                            ql3.serve_log(), clash.stderr, edited.stderr, replaced.stderr])
    for secret in (LITERAL, GLOBAL, SECOND, "now-hidden"):
        assert secret not in everything, (owner, secret)


def test_an_edit_refused_for_a_missing_variable_changes_nothing(ql3: Ql3, owner: str) -> None:
    ql3.run("local", "task", "add", "t", "--schedule", "@once", "--", "true")
    before = ql3.json("local", "task", "show", "t")
    refused = ql3.run("local", "task", "edit", "t", "--schedule", "0 3 * * *",
                      "--secret-env", "API=@NOPE", check=False)
    assert refused.returncode == 2 and "NOPE" in refused.stderr, (owner, refused.stderr)
    after = ql3.json("local", "task", "show", "t")
    assert after["schedule"] == before["schedule"] == "@once"  # one transaction: no half edit
    assert after["secret_env"] == {}
    assert [e for e in after["events"] if e["kind"] == "task_edited"] == []
