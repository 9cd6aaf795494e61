"""Attempts on one worker cannot read each other's secrets (docs/protocols.md §4.8): a real
`ql3 worker run` with --concurrency 2 against the fake control over real HTTP, real
processes, a real script bundle. The first task holds a secret in its environment, its
output (the spool) and its bundle copy; the second scans every /proc/<pid>/environ and
/proc/<pid>/mem it can open, the spool directory and the first's directory, and prints what
it finds into its own log, which the test reads from the fake's PUT."""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from fake_control import LEASE_MS, TOKEN, FakeControl, make_attempt
from worker_kit import pids_running, unique_sleep, wait_until

from qinglong.shared.bundles import pack

pytestmark = pytest.mark.integration

QL3 = str(Path(sys.executable).parent / "ql3")
WORKER_SENTINEL = "visible-to-worker-only"
NEEDS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="uid isolation needs root")

SCAN = r"""
echo "ME $(id -u)"
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  if found=$(tr '\0' '\n' 2>/dev/null < "$d/environ"); then
    echo "ENV $p readable"
    printf '%s\n' "$found" | grep -E 'API_KEY|QL3_' | sed "s/^/ENV $p /"
  fi
  if (: 2>/dev/null < "$d/mem"); then
    echo "MEM $p $(awk '/^Uid:/ {print $2}' "$d/status" 2>/dev/null)"
  fi
done
ls -la "$SPOOL" "$FIRST_DIR" 2>&1
find "$SPOOL" "$FIRST_DIR" -type f -exec cat {} + 2>&1
echo SCAN-DONE
"""


class BundleControl(FakeControl):
    """The fake control plus the bundle grant route and the presigned GET it points at."""

    def __init__(self) -> None:
        self.bundles: dict[str, bytes] = {}
        super().__init__()

    def _answer_normally(self, route: str, body: Any) -> tuple[int, Any]:
        if route == "bundle":
            digest = body["digest"]
            return 200, {"digest": digest, "url": f"{self.url}/get/{digest}",
                         "size_bytes": len(self.bundles[digest]), "expires_in_s": 300}
        return super()._answer_normally(route, body)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler()
        fake = self

        class Handler(base):  # type: ignore[valid-type,misc]
            def do_GET(self) -> None:  # noqa: N802  (the http.server hook name)
                data = fake.bundles.get(self.path.removeprefix("/get/"), b"")
                self.send_response(200 if data else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


@pytest.fixture
def control() -> Iterator[BundleControl]:
    fake = BundleControl().start()
    yield fake  # type: ignore[misc]
    fake.close()


@pytest.fixture
def attempt_root() -> Iterator[Path]:
    """A root every attempt uid can pass through (pytest's own tmp is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="ql3-iso-", dir="/tmp"))
    os.chmod(path, 0o711)
    yield path / "attempts"
    shutil.rmtree(path, ignore_errors=True)


# The chart's uid-isolated pod: root with only these capabilities in its bounding set
SIX_CAPS = ["setpriv", "--inh-caps=-all",
            "--bounding-set=-all,+setuid,+setgid,+kill,+chown,+dac_override,+fowner", "--"]


class Worker:
    def __init__(self, control: FakeControl, tmp: Path, *extra: str,
                 prefix: tuple[str, ...] = ()) -> None:
        self.stderr_path = tmp / "worker.stderr"
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["QL3_WORKER_TOKEN"] = TOKEN
        env["QL3_WORKER_TEST_SENTINEL"] = WORKER_SENTINEL
        with self.stderr_path.open("wb") as err:
            self.proc = subprocess.Popen(
                [*prefix, QL3, "worker", "run", "--control-url", control.url, "--name", "w1",
                 "--spool-dir", str(tmp / "spool"), "--grace", "0.5", *extra],
                env=env, stdout=subprocess.DEVNULL, stderr=err)

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def start_worker(control: FakeControl, tmp_path: Path) -> Iterator[Any]:
    started: list[Worker] = []

    def make(*extra: str, prefix: tuple[str, ...] = ()) -> Worker:
        w = Worker(control, tmp_path, *extra, prefix=prefix)
        started.append(w)
        return w

    yield make
    for w in started:
        w.stop()


def _bundle(control: BundleControl, tmp_path: Path, marker: str) -> str:
    src = tmp_path / "bundle-src"
    src.mkdir()
    (src / "run.sh").write_text(f"#!/bin/sh\necho {marker}\n")
    data = pack(src)
    digest = hashlib.sha256(data).hexdigest()
    control.bundles[digest] = data
    return digest


def _run_pair(control: BundleControl, start_worker: Any, tmp_path: Path, root: Path,
              *flags: str, prefix: tuple[str, ...] = ()) -> tuple[str, str, str, str]:
    """The first task (secret in env, output and bundle copy) running, the second's scan
    done; returns (secret, marker, the first's output, the second's log)."""
    secret = "API_KEY_" + secrets.token_hex(12)
    marker = "BUNDLE-MARKER-" + secrets.token_hex(8)
    naptime = unique_sleep()
    first = make_attempt(f"id -u; echo \"$API_KEY\"; echo \"$API_KEY\" > secret.txt; "
                         f"sleep {naptime}", env={"API_KEY": secret})
    first["bundle_digest"] = _bundle(control, tmp_path, marker)
    first["entry_point"] = "run.sh"
    first_id = first["lease"]["attempt_id"]
    control.queue.append(first)
    worker = start_worker("--concurrency", "2", "--attempt-root", str(root), *flags,
                          prefix=prefix)
    control.wait_for("started", timeout_s=15.0)
    first_dir = (root if flags[-1] != "none" else tmp_path / "spool" / "work") / first_id
    wait_until((first_dir / "secret.txt").exists, 10.0, "the first wrote its file")
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 5.0, "the first is running")
    second = make_attempt(SCAN, env={"SPOOL": str(tmp_path / "spool"),
                                     "FIRST_DIR": str(first_dir)},
                          log_limit_bytes=4 * 1024 * 1024)
    control.queue.append(second)
    done = control.wait_for("complete", timeout_s=30.0)
    assert done[0]["lease"]["attempt_id"] == second["lease"]["attempt_id"], worker.stderr()
    control.cancel = True
    control.wait_for("complete", timeout_s=15.0, count=2)
    logs = {m["lease"]["attempt_id"]: i for i, m in enumerate(control.seen("log-upload"))}
    wait_until(lambda: len(control.puts) >= 2, 10.0, "both logs stored")
    first_log = control.puts[logs[first_id]][1].decode("utf-8", "replace")
    second_log = control.puts[logs[second["lease"]["attempt_id"]]][1].decode(
        "utf-8", "replace")
    assert "SCAN-DONE" in second_log
    assert secret in first_log  # the secret was there to find
    return secret, marker, first_log, second_log


@NEEDS_ROOT
@pytest.mark.parametrize("mode", ["uid", "uid-six-caps", "userns"])
def test_a_second_task_finds_nothing_of_the_first_nor_of_the_worker(
        control, start_worker, tmp_path, attempt_root, mode):
    """With isolation, the scan finds neither the first's secret (environ, memory, spool,
    bundle copy) nor anything of the worker's environment (its token, its variables).
    ``uid-six-caps``: the worker as the chart runs it, root with only the six capabilities
    (``auto`` must pick uid there)."""
    limited = mode == "uid-six-caps"
    secret, marker, first_log, second_log = _run_pair(
        control, start_worker, tmp_path, attempt_root, "--isolation",
        "auto" if limited else mode, prefix=tuple(SIX_CAPS) if limited else ())
    assert secret not in second_log
    assert marker not in second_log
    assert WORKER_SENTINEL not in second_log
    assert TOKEN not in second_log
    me = next(line.split()[1] for line in second_log.splitlines() if line.startswith("ME "))
    first_uid = first_log.splitlines()[0].strip()
    assert me not in (first_uid, "0")
    mem_uids = {line.split()[2] for line in second_log.splitlines()
                if line.startswith("MEM ") and len(line.split()) > 2}
    assert mem_uids <= {me}  # only its own processes' memory


def test_without_isolation_the_same_scan_finds_the_secret(control, start_worker, tmp_path,
                                                          attempt_root):
    """The scan above is able to fail: with --isolation none (and --allow-shared-uid) the
    second task reads the first's secret from /proc/<pid>/environ."""
    secret, _marker, _first, second_log = _run_pair(
        control, start_worker, tmp_path, attempt_root, "--allow-shared-uid",
        "--isolation", "none")
    assert secret in second_log


def test_concurrency_above_one_without_isolation_is_refused(control, start_worker):
    worker = start_worker("--concurrency", "2", "--isolation", "none")
    assert worker.proc.wait(15) == 2
    err = worker.stderr()
    assert "--allow-shared-uid" in err and "secrets" in err
    assert "Traceback" not in err
    assert control.seen("register") == []


def test_allow_shared_uid_runs_and_says_why(control, start_worker):
    control.queue.append(make_attempt("echo ok"))
    worker = start_worker("--concurrency", "2", "--isolation", "none", "--allow-shared-uid")
    done = control.wait_for("complete", timeout_s=15.0)[0]
    assert done["outcome"] == "succeeded"
    assert "can read each other's environment" in worker.stderr()


@NEEDS_ROOT
@pytest.mark.parametrize("mode", ["uid", "uid-six-caps", "userns"])
def test_a_setsid_escapee_is_found_and_stopped(control, start_worker, attempt_root, mode):
    """Leftovers in each mode: the escapee is stopped before the completion, recorded."""
    naptime = unique_sleep()
    control.queue.append(make_attempt(f"setsid sleep {naptime} & sleep 0.3; exit 0"))
    limited = mode == "uid-six-caps"
    start_worker("--isolation", "uid" if limited else mode, "--attempt-root",
                 str(attempt_root), prefix=tuple(SIX_CAPS) if limited else ())
    done = control.wait_for("complete", timeout_s=15.0)[0]
    assert (done["outcome"], done["reason"], done["exit_code"]) == (
        "succeeded", "leftovers_stopped", 0)
    assert pids_running(["sleep", naptime]) == []
    # the private directory is removed once the attempt is over
    wait_until(lambda: [p.name for p in attempt_root.iterdir()] == [".worker-active"], 5.0,
               "the attempt's directory gone")


@NEEDS_ROOT
def test_uid_mode_a_process_that_dropped_the_lock_is_still_found(control, start_worker,
                                                                 attempt_root):
    """In uid mode every process of the attempt's uid is a leftover, even one that closed
    every inherited fd (so holds no lock) and left the group."""
    naptime = unique_sleep()
    script = (f"setsid sh -c 'for fd in $(ls /proc/self/fd); do "
              f"[ $fd -gt 2 ] && eval \"exec $fd>&-\"; done; exec sleep {naptime}' "
              f"</dev/null >/dev/null 2>&1 & sleep 0.5; exit 0")
    control.queue.append(make_attempt(script))
    start_worker("--isolation", "uid", "--attempt-root", str(attempt_root))
    done = control.wait_for("complete", timeout_s=15.0)[0]
    assert done["reason"] == "leftovers_stopped"
    assert pids_running(["sleep", naptime]) == []


@NEEDS_ROOT
@pytest.mark.parametrize("mode", ["uid", "userns"])
def test_worker_sigkill_takes_the_isolated_escapee_with_it(control, start_worker,
                                                           attempt_root, mode):
    naptime = unique_sleep()
    control.queue.append(make_attempt(f"setsid sleep {naptime} & sleep 300"))
    worker = start_worker("--isolation", mode, "--attempt-root", str(attempt_root))
    control.wait_for("started", timeout_s=15.0)
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 5.0, "escapee started")
    worker.proc.send_signal(signal.SIGKILL)
    # the wrapper reads end-of-file and stops the escapee before the lease could end
    wait_until(lambda: not pids_running(["sleep", naptime]), LEASE_MS / 1000, "escapee gone")


def test_help_names_the_isolation_modes() -> None:
    out = subprocess.run([QL3, "worker", "run", "--help"], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "80"}, check=True).stdout
    assert "--isolation [auto|uid|userns|none]" in out
    assert "--allow-shared-uid" in out
    assert max(len(line) for line in out.splitlines()) <= 80


@NEEDS_ROOT
def test_uid_mode_home_and_working_directory_belong_to_the_attempt_uid(control, start_worker,
                                                                      attempt_root):
    attempt = make_attempt('echo "home=$HOME"; echo "pwd=$(pwd)"; '
                           'echo "owner=$(stat -c %u:%a .)"; echo "me=$(id -u):$(id -G)"; '
                           'echo 签到成功 > note.txt && cat note.txt')
    control.queue.append(attempt)
    start_worker("--isolation", "uid", "--attempt-root", str(attempt_root))
    done = control.wait_for("complete", timeout_s=15.0)[0]
    assert done["outcome"] == "succeeded"
    wait_until(lambda: len(control.puts) >= 1, 5.0, "log stored")
    log = dict(line.split("=", 1) for line in
               control.puts[0][1].decode().splitlines() if "=" in line)
    private = str(attempt_root / attempt["lease"]["attempt_id"])
    assert log["home"] == log["pwd"] == private
    uid = log["me"].split(":")[0]
    assert log["owner"] == f"{uid}:700"
    assert log["me"] == f"{uid}:{uid}"  # its own group only, no supplementary groups
    assert int(uid) >= 2_000_000_000
    assert "签到成功" in control.puts[0][1].decode()


@NEEDS_ROOT
@pytest.mark.parametrize("mode", ["uid", "userns"])
def test_a_timeout_stops_an_isolated_attempt_within_the_grace(control, start_worker,
                                                              attempt_root, mode):
    """TERM reaches the command (the namespace's init and its parent ignore it), the group
    is gone within the grace, and the attempt completes ``timed_out``."""
    naptime = unique_sleep()
    control.queue.append(make_attempt(f"sleep {naptime} & sleep {naptime}; echo never",
                                      timeout_ms=500))
    start_worker("--isolation", mode, "--attempt-root", str(attempt_root))
    wait_until(lambda: bool(pids_running(["sleep", naptime])), 10.0, "started")
    done = control.wait_for("complete", timeout_s=15.0)[0]
    assert (done["outcome"], done["reason"]) == ("timed_out", "timeout")
    assert pids_running(["sleep", naptime]) == []
