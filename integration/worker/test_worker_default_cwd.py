"""Where a task without a working directory runs on a real worker: the worker user's HOME
(as in the local profile), ``/`` when HOME is unset or not a directory; never the worker's
own working directory."""

from __future__ import annotations

import pytest
from fake_control import make_attempt

pytestmark = pytest.mark.integration


def _pwd_of_attempt(control, start_worker, tmp_path, home: str | None) -> str:
    elsewhere = tmp_path / "worker-cwd"
    elsewhere.mkdir()
    control.queue.append(make_attempt("pwd", cwd=None))
    start_worker(env_extra={"HOME": home}, cwd=elsewhere)
    done = control.wait_for("complete")[0]
    assert done["outcome"] == "succeeded"
    _headers, body = control.puts[0]
    return body.decode().strip()


def test_a_task_without_cwd_runs_in_the_workers_home(control, start_worker, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    assert _pwd_of_attempt(control, start_worker, tmp_path, str(home)) == str(home)


@pytest.mark.parametrize("home", [None, "/nonexistent-ql3-home", "relative/home"],
                         ids=["unset", "missing", "relative"])
def test_a_task_without_cwd_runs_in_root_when_home_is_unusable(
        control, start_worker, tmp_path, home):
    assert _pwd_of_attempt(control, start_worker, tmp_path, home) == "/"
