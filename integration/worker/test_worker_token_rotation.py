"""A worker whose pool token is rotated while it runs (an operator's own 0600 ``--token-file``,
replaced atomically; the chart's pods use QL3_WORKER_TOKEN and roll instead): control starts
refusing token A and accepts B,
the ``--token-file`` now holds B. At its next 401 the worker re-reads the file once, switches
to B and sends the refused request again, so its running attempt goes on and completes. A
file that still holds the refused token, or a token from the environment, stops the worker
as a revoked token always did (exit 1, one line)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fake_control import TOKEN, make_attempt
from worker_kit import pids_running, unique_sleep, wait_until

pytestmark = pytest.mark.integration

NEW_TOKEN = "rotated-token-" + "y" * 20
REFUSED = "the worker token was refused (401): revoked or unknown; stopping"


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a 0600 file holding ``text`` (as an operator should:
    a new file, renamed into place)."""
    tmp = path.with_name(path.name + ".new")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    os.replace(tmp, path)


def test_a_rotated_token_file_is_reread_at_a_401_and_the_running_attempt_completes(
        control, start_worker, tmp_path):
    token_file = tmp_path / "token"
    _write_private(token_file, TOKEN)
    control.queue.append(make_attempt("sleep 2.5; echo done-after-rotation",
                                      lease_ms=3000, heartbeat_ms=500))
    worker = start_worker("--token-file", str(token_file), token_env=False)
    control.wait_for("started")

    _write_private(token_file, NEW_TOKEN)
    control.tokens = {NEW_TOKEN}  # the old token's overlap ended: A is refused from now on

    done = control.wait_for("complete", timeout_s=15.0)[0]
    assert (done["outcome"], done["exit_code"]) == ("succeeded", 0), done
    assert control.refused, "the old token was never refused: the test proved nothing"
    beats_after = [t for t, route, _ in control.log
                   if route == "heartbeat" and t > control.refused[0][0]]
    assert beats_after, "no heartbeat was accepted after the switch"
    claims = len(control.seen("claim"))
    control.wait_for("claim", count=claims + 1)  # still claiming, with the new token
    assert worker.proc.poll() is None, worker.stderr()
    err = worker.stderr()
    assert "switching to the new token" in err, err
    assert REFUSED not in err and "Traceback" not in err
    assert TOKEN not in err and NEW_TOKEN not in err


def test_a_token_file_still_holding_the_refused_token_stops_the_worker_as_before(
        control, start_worker, tmp_path):
    token_file = tmp_path / "token"
    _write_private(token_file, TOKEN)
    naptime = unique_sleep()
    control.queue.append(make_attempt(f"sleep {naptime}"))
    worker = start_worker("--token-file", str(token_file), token_env=False)
    control.wait_for("started")
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 5.0, "sleeper started")
    control.tokens = {NEW_TOKEN}  # rotated in control, but the file was not updated

    assert worker.proc.wait(15) == 1, worker.stderr()
    err = worker.stderr()
    assert err.count(REFUSED) == 1, err
    assert "holds the same token" in err, err
    assert pids_running(["sleep", naptime]) == []
    assert TOKEN not in err


def test_a_token_from_the_environment_is_not_reloaded(control, start_worker):
    worker = start_worker()
    control.wait_for("claim")
    control.tokens = {NEW_TOKEN}
    assert worker.proc.wait(10) == 1, worker.stderr()
    assert worker.stderr().count(REFUSED) == 1
