"""Secret values are masked in the task's log (docs/operations.md "Secrets in output").

Through the real `ql3`: a task given a secret variable prints it in two writes with a pause
between (the value split inside a character); the log file, `logs` and the foreground run's
output show `***` and never the value.
"""

from __future__ import annotations

import subprocess

import pytest

from harness import QL3, Ql3

pytestmark = pytest.mark.integration

SECRET = "pt_key=秘密AAb9x"  # 21 bytes; the first write ends inside 秘
PRINT_IN_TWO = ('printf "cookie: "; printf %s "$COOKIE" | head -c 9; sleep 0.5; '
                'printf %s "$COOKIE" | tail -c +10; printf " short=%s\\n" "$PIN"')


def _add(ql3: Ql3, name: str) -> None:
    added = subprocess.run(
        [QL3, "local", "task", "add", name, "--schedule", "@once", "--secret-env", "COOKIE",
         "--env", "PIN=12345", "--", "sh", "-c", PRINT_IN_TWO],
        input=SECRET, env=ql3.env, capture_output=True, text=True, timeout=60, check=False)
    assert added.returncode == 0, added.stderr


def _log_bytes(ql3: Ql3) -> bytes:
    logs = list((ql3.data_dir / "logs").rglob("*.log"))
    assert len(logs) == 1
    return logs[0].read_bytes()


def test_a_secret_printed_in_two_writes_is_masked_in_the_log_and_in_logs(ql3: Ql3) -> None:
    _add(ql3, "cookie-task")
    run = ql3.run("local", "run", "cookie-task")  # foreground: prints the output as written
    logs = ql3.run("local", "logs", "cookie-task@last")
    data = _log_bytes(ql3)
    assert data == b"cookie: *** short=12345\n"
    assert logs.stdout == "cookie: *** short=12345\n"
    assert "cookie: *** short=12345" in run.stdout
    for text in (run.stdout, run.stderr, logs.stdout, logs.stderr):
        assert "AAb9x" not in text and "秘密" not in text


def test_a_secret_is_masked_through_serve_with_a_follower(ql3: Ql3) -> None:
    _add(ql3, "cookie-served")
    serve = ql3.start_serve()
    try:
        run = ql3.json("local", "run", "cookie-served")
        follower = subprocess.run([QL3, "local", "logs", run["id"], "-f"], check=False,
                                  env=ql3.env, capture_output=True, timeout=60)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert follower.stdout == b"cookie: *** short=12345\n"
    assert SECRET.encode() not in _log_bytes(ql3)
    assert ql3.serve_log().count("AAb9x") == 0


def test_each_account_of_a_multi_account_secret_is_masked(ql3: Ql3) -> None:
    """``COOKIE=ck1&ck2`` (Qinglong's multi-account form): a script that splits it and prints
    one account per line gets ``***`` for each, not only for the whole value."""
    split = 'for ck in $(echo "$COOKIE" | tr "&" " "); do echo "账号 $ck"; done'
    added = subprocess.run(
        [QL3, "local", "task", "add", "accounts", "--schedule", "@once", "--secret-env",
         "COOKIE", "--", "sh", "-c", split],
        input="pt_key=AAA111;&pt_key=BBB222;", env=ql3.env, capture_output=True, text=True,
        timeout=60, check=False)
    assert added.returncode == 0, added.stderr
    ql3.run("local", "run", "accounts")
    assert _log_bytes(ql3) == "账号 ***\n账号 ***\n".encode()


def _set_var(ql3: Ql3, name: str, value: str, *options: str) -> None:
    done = subprocess.run([QL3, "local", "vars", "set", name, *options], input=value,
                          env=ql3.env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_secret_global_variables_are_masked_without_a_secret_env_reference(ql3: Ql3) -> None:
    """A global variable marked secret (the default of `vars set`) reaches every task's
    environment, so its values are masked in every task's log, each account too; a
    ``--plain`` one is printed as is, and a task's own --env value under a secret
    variable's name is the task's, not the secret."""
    _set_var(ql3, "JD_COOKIE", "pt_key=AAA111;pt_pin=user1;")
    _set_var(ql3, "JD_COOKIE", "pt_key=BBB222;pt_pin=user2;", "--add")
    _set_var(ql3, "PUSH_TOKEN", "globalsecret999", "--secret")
    _set_var(ql3, "LANG_HINT", "plainhint42", "--plain")
    _set_var(ql3, "OVERRIDDEN", "globalvalue77")
    script = ('echo "JD_COOKIE=$JD_COOKIE"; echo "first=${JD_COOKIE%%&*}"; '
              'echo "tok=$PUSH_TOKEN"; echo "hint=$LANG_HINT"; echo "own=$OVERRIDDEN"')
    added = subprocess.run(
        [QL3, "local", "task", "add", "globals", "--schedule", "@once",
         "--env", "OVERRIDDEN=taskvalue88", "--", "sh", "-c", script],
        env=ql3.env, capture_output=True, text=True, timeout=60, check=False)
    assert added.returncode == 0, added.stderr
    run = ql3.run("local", "run", "globals")
    logs = ql3.run("local", "logs", "globals@last")
    expected = "JD_COOKIE=***\nfirst=***\ntok=***\nhint=plainhint42\nown=taskvalue88\n"
    assert _log_bytes(ql3) == expected.encode()
    assert logs.stdout == expected
    for text in (run.stdout, run.stderr, logs.stdout, logs.stderr):
        assert "AAA111" not in text and "BBB222" not in text
        assert "globalsecret999" not in text
