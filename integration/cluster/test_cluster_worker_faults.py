"""Worker faults end to end (issue 11 "Tests", items 3–4; docs/protocols.md §4.2; cases C11, C12,
C21).

Real ``ql3 control serve`` and ``ql3 worker run`` processes on a fresh PostgreSQL database and
moto's S3 over real HTTP; real signals. Each attempt's processes carry a unique marker in their
environment (the task's env), so the test finds every one of them in ``/proc`` whatever its
process group. Lease 3000 ms, heartbeat 1000 ms: the worker's own fence deadline is the last
renewal + 2 s (a 1 s margin).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from cluster_kit import Cluster, Proc, wait_for
from loopback_proxy import LoopbackProxy

pytestmark = pytest.mark.integration

MARK = "QL3_E2E_MARK"
LEASE_MS, HEARTBEAT_MS = 3000, 1000
FINISHED = ("succeeded", "failed", "timed_out", "cancelled", "lost")


def marked_pids(marker: str) -> list[int]:
    """Live (non-zombie) pids whose environment holds ``MARK=marker``."""
    needle = f"{MARK}={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
            with open(f"/proc/{name}/stat") as fh:
                state = fh.read().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if needle in env and state not in ("Z", "X"):
            found.append(int(name))
    return found


def wait_marked_gone(marker: str, timeout_s: float) -> float:
    """Monotonic time at which no process of ``marker`` was alive; AssertionError after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not marked_pids(marker):
            return time.monotonic()
        time.sleep(0.01)
    raise AssertionError(f"processes of {marker} still alive: {marked_pids(marker)}")


def first_sleeps_then_succeeds(flag: Path) -> str:
    """A shell command whose first attempt leaves two background sleepers and waits; any
    later attempt (the flag file exists) exits 0 at once."""
    return (f"if [ -e {flag} ]; then echo retried; exit 0; fi; : > {flag}; "
            "sleep 300 & sleep 301 & wait")


class Scene:
    """One control replica, an admin API client, a worker-pool token and the database."""

    def __init__(self, cluster: Cluster, **control: Any) -> None:
        self.cluster = cluster
        self.admin = cluster.token("admin")
        self.worker_token = cluster.token("worker", pool="default", labels="zone=a")
        self.control = cluster.start_control("c1", lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS,
                                             **control)
        assert self.control.url is not None
        self.url = self.control.url
        self.api = cluster.api(self.url, self.admin)
        self.db = cluster.db.connect()
        self._markers: list[str] = []
        self._proxies: list[LoopbackProxy] = []
        self._workers: list[Proc] = []

    def proxy(self) -> LoopbackProxy:
        """A loopback proxy to control; at the end it is healed, the workers drain through
        it, then it closes."""
        proxy = LoopbackProxy(self.url)
        self._proxies.append(proxy)
        return proxy

    def marker(self) -> str:
        """A new marker for one task's processes; any still alive at the end are killed."""
        marker = secrets.token_hex(8)
        self._markers.append(marker)
        return marker

    def worker(self, name: str, url: str | None = None, concurrency: int = 1) -> Proc:
        proc = self.cluster.start_worker(name, self.worker_token, url or self.url,
                                         concurrency=concurrency)
        self._workers.append(proc)
        return proc

    def run_task(self, name: str, shell: str, marker: str, max_attempts: int = 2) -> str:
        """Create a manual task whose processes carry ``marker``; run it now; the run id."""
        r = self.api.post("/v1/tasks", json={
            "name": name, "shell": shell, "max_attempts": max_attempts,
            "retry_backoff_ms": 100, "retry_backoff_cap_ms": 200,
            "env": {MARK: {"value": marker}}})
        assert r.status_code == 201, r.text
        r = self.api.post(f"/v1/tasks/{name}/run")
        assert r.status_code == 201, r.text
        run_id: str = r.json()["id"]
        return run_id

    def now(self) -> Any:
        return self.db.execute("SELECT now()").fetchone()[0]  # type: ignore[index]

    def attempts(self, run_id: str) -> list[dict[str, Any]]:
        cur = self.db.execute(
            "SELECT a.id::text AS id, a.number, a.status, a.reason, a.lease_expires_at, "
            "a.heartbeat_at, a.started_at, a.finished_at, a.completion, "
            "a.worker_incarnation_id::text AS incarnation, i.name AS worker "
            "FROM attempts a LEFT JOIN worker_incarnations i ON i.id = a.worker_incarnation_id "
            "WHERE a.run_id = %s ORDER BY a.number", (run_id,))
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def wait_attempt(self, run_id: str, number: int, statuses: tuple[str, ...],
                     timeout_s: float) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            rows = [a for a in self.attempts(run_id)
                    if a["number"] == number and a["status"] in statuses]
            return rows[0] if rows else None
        row = wait_for(found, timeout_s)
        assert row is not None, (f"attempt {number} of {run_id} never {statuses}: "
                                 f"{self.attempts(run_id)}")
        return row

    def run_status(self, run_id: str) -> str:
        status: str = self.db.execute("SELECT status FROM runs WHERE id = %s",
                                      (run_id,)).fetchone()[0]  # type: ignore[index]
        return status

    def wait_run(self, run_id: str, timeout_s: float) -> str:
        wait_for(lambda: self.run_status(run_id) in FINISHED, timeout_s)
        return self.run_status(run_id)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        r = self.api.get(f"/v1/runs/{run_id}")
        assert r.status_code == 200, r.text
        events: list[dict[str, Any]] = r.json()["events"]
        return events

    def incarnations(self, name: str) -> list[str]:
        rows = self.db.execute("SELECT id::text FROM worker_incarnations WHERE name = %s "
                               "ORDER BY started_at", (name,)).fetchall()
        return [r[0] for r in rows]

    def close(self) -> None:
        for proxy in self._proxies:
            proxy.cut(False)
        for proc in self._workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.popen.pid, signal.SIGCONT)  # a test that failed while paused
            proc.terminate(timeout=15)
        for proxy in self._proxies:
            proxy.close()
        for marker in self._markers:  # a failed test leaves no sleeper behind
            for pid in marked_pids(marker):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        self.api.close()
        self.db.close()


@pytest.fixture
def scene(cluster: Cluster) -> Any:
    s = Scene(cluster)
    try:
        yield s
    finally:
        s.close()


def running_attempt(scene: Scene, run_id: str, marker: str, members: int = 4
                    ) -> dict[str, Any]:
    """Attempt 1 of ``run_id`` reported started and its processes (wrapper, sh, two sleeps)
    all up."""
    row = scene.wait_attempt(run_id, 1, ("running",), 20)
    assert wait_for(lambda: len(marked_pids(marker)) >= members, 5), marked_pids(marker)
    return row


def test_sigkilled_worker_takes_its_attempt_along_and_the_run_is_retried_elsewhere(
        scene: Scene, tmp_path: Path) -> None:
    marker = scene.marker()
    w1 = scene.worker("w1")
    run_id = scene.run_task("killed", first_sleeps_then_succeeds(tmp_path / "flag"), marker)
    first = running_attempt(scene, run_id, marker)
    assert first["worker"] == "w1"

    killed_at = time.monotonic()
    w1.kill()
    gone_at = wait_marked_gone(marker, timeout_s=3)
    assert gone_at - killed_at < 1.0, "the attempt's processes outlived the worker by > 1 s"

    scene.worker("w2")
    lost = scene.wait_attempt(run_id, 1, ("lost",), 15)
    assert lost["reason"] == "lost"  # the worker had reported the process started
    assert lost["finished_at"] >= lost["lease_expires_at"]  # recovered only once expired
    assert scene.wait_run(run_id, 20) == "succeeded"
    second = scene.attempts(run_id)[1]
    assert (second["number"], second["status"], second["worker"]) == (2, "succeeded", "w2")
    kinds = [(e["kind"], e["attempt_id"]) for e in scene.events(run_id)]
    assert ("attempt_lost", first["id"]) in kinds
    assert ("attempt_completed", first["id"]) not in kinds


def test_worker_cut_off_from_control_kills_its_attempt_before_the_lease_expires(
        scene: Scene, tmp_path: Path) -> None:
    marker = scene.marker()
    proxy = scene.proxy()
    w1 = scene.worker("w1", url=proxy.url)
    run_id = scene.run_task("cutoff", first_sleeps_then_succeeds(tmp_path / "flag"), marker)
    first = running_attempt(scene, run_id, marker)
    wait_for(lambda: proxy.records("/v1/worker/heartbeat"), 5)  # it renews through us

    proxy.cut(True)
    wait_marked_gone(marker, timeout_s=LEASE_MS / 1000 + 2)
    died_db = scene.now()  # database clock, right after the last process was seen gone
    expires = scene.attempts(run_id)[0]["lease_expires_at"]
    assert died_db < expires, (
        f"group alive until {died_db}, lease on the database expired at {expires}")
    # the worker's fence and the wrapper's copy of its deadline fire together: either kills
    assert wait_for(lambda: "lease fenced: group killed" in w1.log(), 3), w1.log()

    scene.worker("w2")  # reaches control directly
    lost = scene.wait_attempt(run_id, 1, ("lost",), 15)
    assert lost["reason"] == "lost"
    assert lost["lease_expires_at"] == expires  # never renewed once cut off
    assert scene.wait_run(run_id, 20) == "succeeded"
    second = scene.attempts(run_id)[1]
    assert (second["status"], second["worker"]) == ("succeeded", "w2")
    assert first["id"] != second["id"]
    assert "completed" not in w1.log()


def test_restarted_worker_under_the_same_name_inherits_nothing(
        scene: Scene, tmp_path: Path) -> None:
    """C12."""
    markers = [scene.marker(), scene.marker()]
    w1 = scene.worker("w1", concurrency=2)
    runs = [scene.run_task(f"held{i}", first_sleeps_then_succeeds(tmp_path / f"flag{i}"), m)
            for i, m in enumerate(markers)]
    old = [running_attempt(scene, run_id, m) for run_id, m in zip(runs, markers, strict=True)]
    assert {a["worker"] for a in old} == {"w1"}
    old_incarnation = old[0]["incarnation"]
    assert old[1]["incarnation"] == old_incarnation

    w1.kill()
    killed_db = scene.now()
    log_before_restart = len(w1.log())
    w1_again = scene.worker("w1", concurrency=2)
    for m in markers:
        wait_marked_gone(m, timeout_s=2)

    for run_id in runs:
        assert scene.wait_run(run_id, 25) == "succeeded"
    incarnations = scene.incarnations("w1")
    assert len(incarnations) == 2 and incarnations[0] == old_incarnation
    new_incarnation = incarnations[1]
    for run_id, before in zip(runs, old, strict=True):
        first, second = scene.attempts(run_id)
        assert (first["id"], first["status"], first["reason"]) == (before["id"], "lost", "lost")
        assert first["incarnation"] == old_incarnation
        assert first["heartbeat_at"] <= killed_db  # never renewed after the kill
        assert first["lease_expires_at"] <= killed_db + timedelta(milliseconds=LEASE_MS)
        assert first["completion"] is None
        assert (second["status"], second["incarnation"]) == ("succeeded", new_incarnation)
        kinds = [(e["kind"], e["attempt_id"]) for e in scene.events(run_id)]
        assert ("attempt_completed", first["id"]) not in kinds
    restarted_log = w1_again.log()[log_before_restart:]
    assert f"incarnation {new_incarnation}" in restarted_log
    for before in old:
        assert before["id"] not in restarted_log


def test_completion_replayed_after_its_answer_was_lost_keeps_the_outcome(
        scene: Scene) -> None:
    marker = scene.marker()
    proxy = scene.proxy()
    proxy.drop_response("/v1/worker/complete", 1)
    w1 = scene.worker("w1", url=proxy.url)
    run_id = scene.run_task("replayed", "echo replay-me", marker, max_attempts=1)
    assert scene.wait_run(run_id, 20) == "succeeded"
    wait_for(lambda: len(proxy.records("/v1/worker/complete")) >= 2, 5)
    time.sleep(0.5)  # anything further the worker would send about this attempt

    first, second, *more = proxy.records("/v1/worker/complete")
    assert more == []
    assert (first["status"], first["dropped"]) == (200, True)
    assert first["answer"] == {"ok": True, "replayed": False}
    assert (second["status"], second["dropped"]) == (200, False)
    assert second["answer"] == {"ok": True, "replayed": True}
    assert second["request"] == first["request"]  # the same write, sent again

    (attempt,) = scene.attempts(run_id)
    assert (attempt["status"], attempt["completion"]["report"]["outcome"]) == (
        "succeeded", "succeeded")
    kinds = [e["kind"] for e in scene.events(run_id)]
    assert kinds.count("attempt_completed") == 1
    assert kinds.count("run_finished") == 1
    log = scene.api.get(f"/v1/attempts/{attempt['id']}/log")
    assert log.status_code == 200 and "replay-me" in log.text
    worker_log = w1.log()
    number = scene.api.get(f"/v1/runs/{run_id}").json()["number"]
    assert f"replayed#{number} attempt 1: completed succeeded" in worker_log, worker_log
    for sign in ("lease lost", "lease fenced", "group killed", "not recorded"):
        assert sign not in worker_log


def test_heartbeat_above_a_third_of_the_lease_is_refused_at_start(cluster: Cluster) -> None:
    """C11 for control: nothing starts, exit 2, both numbers named."""
    out = cluster.ql3("control", "serve", "--database-url", cluster.db.runtime_url,
                      "--runtime-role", cluster.db.runtime_role, "--listen", "127.0.0.1:1",
                      "--log-bucket", cluster.bucket, "--s3-endpoint", cluster.s3_endpoint,
                      "--lease-ms", "3000", "--heartbeat-ms", "1500", check=False, timeout=30)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "3000" in out.stderr and "1500" in out.stderr
    assert "Traceback" not in out.stderr


def test_paused_worker_is_fenced_and_the_new_claimants_outcome_stands(
        scene: Scene, tmp_path: Path) -> None:
    """C21: a worker frozen (SIGSTOP) past its lease. Its attempt's processes die before the
    lease expires on the database although the worker cannot act (the wrapper holds the
    worker's fence deadline); the attempt is recovered and re-claimed by another worker. On
    SIGCONT the stale worker forgets the attempt at once, and its late writes get 409 and
    change nothing: the recorded outcome is the new claimant's."""
    marker = scene.marker()
    proxy = scene.proxy()
    w1 = scene.worker("w1", url=proxy.url)
    run_id = scene.run_task("paused", first_sleeps_then_succeeds(tmp_path / "flag"), marker)
    first = running_attempt(scene, run_id, marker)
    wait_for(lambda: proxy.records("/v1/worker/heartbeat"), 5)

    os.kill(w1.popen.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        wait_marked_gone(marker, timeout_s=LEASE_MS / 1000 + 2)
        died_db = scene.now()
        expires = scene.attempts(run_id)[0]["lease_expires_at"]
        assert died_db < expires, (
            f"group alive until {died_db}, lease on the database expired at {expires}")
        lost = scene.wait_attempt(run_id, 1, ("lost",), 15)
        assert (lost["reason"], lost["lease_expires_at"]) == ("lost", expires)
        scene.worker("w2")
        assert scene.wait_run(run_id, 20) == "succeeded"
        heartbeats = proxy.records("/v1/worker/heartbeat")
        assert heartbeats[-1]["at"] < stopped_at + 0.5  # nothing sent while frozen
        stale_beat = heartbeats[-1]["request"]
        assert stale_beat["lease"]["attempt_id"] == first["id"]
    finally:
        resumed_at = time.monotonic()
        os.kill(w1.popen.pid, signal.SIGCONT)
    # the resumed worker sees its fence passed and forgets the attempt at once
    assert wait_for(lambda: "group killed, attempt forgotten" in w1.log(), 1.0), w1.log()
    time.sleep(1.0)  # anything the resumed worker sends about its old lease, it sends now
    late = [r for r in proxy.records() if r["at"] >= resumed_at
            and ((r["request"] or {}).get("lease") or {}).get("attempt_id") == first["id"]]
    assert all(r["status"] == 409 for r in late), late
    number = scene.api.get(f"/v1/runs/{run_id}").json()["number"]
    assert f"paused#{number} attempt 1: starting" in w1.log(), w1.log()  # w1 ran it
    assert f"paused#{number} attempt 1: completed" not in w1.log()

    # the stale worker's writes delivered late (a slow network): 409, nothing changes
    stale = scene.cluster.api(scene.url, scene.worker_token)
    try:
        assert stale.post("/v1/worker/heartbeat", json=stale_beat).status_code == 409
        report = {"lease": stale_beat["lease"], "outcome": "failed", "exit_code": 1,
                  "signal": None, "log": None, "reason": None}
        answer = stale.post("/v1/worker/complete", json=report)
        assert answer.status_code == 409, answer.text
    finally:
        stale.close()
    old, new = scene.attempts(run_id)
    assert (old["status"], old["reason"], old["completion"]) == ("lost", "lost", None)
    assert (new["status"], new["worker"]) == ("succeeded", "w2")
    assert scene.run_status(run_id) == "succeeded"
    kinds = [(e["kind"], e["attempt_id"]) for e in scene.events(run_id)]
    assert kinds.count(("attempt_completed", new["id"])) == 1
    assert ("attempt_completed", old["id"]) not in kinds


# a child that closes every inherited fd (the lock's included) but stays in the group, and a
# wait until it has: the lock is then free while the child lives
CLOSER = (f"{sys.executable} -c 'import os, sys; os.closerange(3, 1 << 16); "
          f"os.execvp(\"sleep\", [\"sleep\", \"300\"])' </dev/null >/dev/null 2>&1 & "
          f'while [ "$(ls /proc/$!/fd | wc -l)" -gt 3 ]; do sleep 0.05; done; exit 0')
ESCAPEE = "setsid sleep 301 </dev/null >/dev/null 2>&1 & sleep 0.3; exit 0"


@pytest.mark.parametrize("shell", [ESCAPEE, CLOSER],
                         ids=["escaped_the_group_holding_the_lock",
                              "closed_the_lock_in_the_group"])
def test_a_leftover_is_stopped_and_recorded_once(scene: Scene, shell: str) -> None:
    """Each leftover look through the real cluster (docs/protocols.md §4.2 "Attempt lock and
    leftovers"): a ``setsid`` escapee is found by the lock it holds; a child that closed the
    lock's fd but stayed in the group, by the group. Either is stopped before the
    completion, recorded once: ``succeeded`` with reason ``leftovers_stopped``, one
    attempt, nothing of it alive."""
    marker = scene.marker()
    scene.worker("w1")
    run_id = scene.run_task("leaves-one", shell, marker, max_attempts=1)
    assert scene.wait_run(run_id, 30) == "succeeded"
    [attempt] = scene.attempts(run_id)
    assert (attempt["status"], attempt["reason"]) == ("succeeded", "leftovers_stopped")
    assert marked_pids(marker) == []  # stopped before the completion was sent
    kinds = [e["kind"] for e in scene.events(run_id)]
    assert kinds.count("attempt_completed") == 1 and kinds.count("run_finished") == 1
