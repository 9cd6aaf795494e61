"""Live cluster logs end to end, through the faults they must hold (docs/protocols.md §4.2
"Live log chunks (worker)", §4.4 raw read, §4.9).

Real ``ql3 control serve`` replicas on a fresh PostgreSQL database, moto's S3 over real HTTP,
a real ``ql3 worker run`` whose attempts stream their output as chunks, and the real
``ql3 cluster logs`` client; real signals. Lease 6000 ms, heartbeat 2000 ms. Every wait is a
condition with a deadline; nothing here asserts a duration.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from cluster_kit import QL3, Cluster, Proc, wait_for
from live_log_kit import raw_read, read_all_raw
from loopback_proxy import LoopbackProxy

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

LEASE_MS, HEARTBEAT_MS = 6000, 2000
TERMINAL = ("succeeded", "failed", "timed_out", "cancelled", "lost")


def lines_script(count: int, pause_s: float, prefix: str = "行") -> tuple[str, bytes]:
    """A shell command printing ``count`` numbered Chinese lines ``pause_s`` apart, and the
    exact bytes it writes."""
    shell = (f'i=1; while [ $i -le {count} ]; do echo "{prefix} $i 输出"; i=$((i+1)); '
             f"sleep {pause_s}; done")
    out = "".join(f"{prefix} {i} 输出\n" for i in range(1, count + 1)).encode()
    return shell, out


class Scene:
    """Control replicas, an admin token, a worker-pool token and the database."""

    def __init__(self, cluster: Cluster, replicas: int = 1) -> None:
        self.cluster = cluster
        self.admin = cluster.token("admin")
        self.worker_token = cluster.token("worker", pool="default", labels="zone=a")
        self.controls = cluster.start_controls([f"c{i + 1}" for i in range(replicas)],
                                               lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS)
        self.db = cluster.db.connect()

    def url(self, i: int = 0) -> str:
        url = self.controls[i].url
        assert url is not None
        return url

    def worker(self, name: str, urls: str | None = None) -> Proc:
        return self.cluster.start_worker(name, self.worker_token, urls or self.url(),
                                         concurrency=1, labels="zone=a")

    def run_task(self, name: str, shell: str, url: str | None = None, max_attempts: int = 1,
                 env: dict[str, Any] | None = None) -> str:
        """A manual task run now; its run id."""
        with self.cluster.api(url or self.url(), self.admin) as api:
            spec: dict[str, Any] = {"name": name, "shell": shell, "labels": {"zone": "a"},
                                    "max_attempts": max_attempts, "retry_backoff_ms": 100,
                                    "retry_backoff_cap_ms": 200}
            if env:
                spec["env"] = env
            r = api.post("/v1/tasks", json=spec)
            assert r.status_code == 201, r.text
            r = api.post(f"/v1/tasks/{name}/run")
            assert r.status_code == 201, r.text
        run_id: str = r.json()["id"]
        return run_id

    def attempts(self, run_id: str) -> list[dict[str, Any]]:
        cur = self.db.execute(
            "SELECT id::text AS id, number, status, reason, log_end, log_rows "
            "FROM attempts WHERE run_id = %s ORDER BY number", (run_id,))
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def attempt(self, run_id: str, number: int = 1) -> dict[str, Any] | None:
        return next((a for a in self.attempts(run_id) if a["number"] == number), None)

    def wait_attempt(self, run_id: str, number: int, pred: Any, timeout_s: float,
                     what: str) -> dict[str, Any]:
        row = wait_for(lambda: (a := self.attempt(run_id, number)) is not None and pred(a)
                       and a, timeout_s, 0.05)
        assert row, f"attempt {number} never {what}: {self.attempts(run_id)}"
        return dict(row)

    def run_status(self, run_id: str) -> str:
        status: str = self.db.execute("SELECT status FROM runs WHERE id = %s",
                                      (run_id,)).fetchone()[0]  # type: ignore[index]
        return status

    def chunk_bytes(self, attempt_id: str) -> bytes:
        """The data rows of ``attempt_id`` in PostgreSQL, in offset order, concatenated."""
        rows = self.db.execute("SELECT data FROM attempt_log_chunks WHERE attempt_id = %s "
                               "AND NOT gap ORDER BY start_offset", (attempt_id,)).fetchall()
        return b"".join(bytes(r[0]) for r in rows)

    def cli(self, *args: str, url: str | None = None, token: str | None = None,
            timeout: float = 90) -> subprocess.CompletedProcess[bytes]:
        env = self.cluster.env(QL3_CONTROL_URL=url or self.url(), QL3_TOKEN=token or self.admin,
                               COLUMNS="80")
        out = subprocess.run([QL3, "cluster", *args], env=env, capture_output=True,
                             timeout=timeout, check=False)
        assert b"Traceback" not in out.stdout + out.stderr, out.stderr
        return out

    def close(self) -> None:
        self.db.close()


@pytest.fixture
def scene(cluster: Cluster) -> Any:
    s = Scene(cluster)
    try:
        yield s
    finally:
        s.close()


def test_control_replica_sigkilled_while_chunks_flow_the_worker_resumes_on_another(
        cluster: Cluster) -> None:
    """The worker's replica dies (SIGKILL) mid-stream: the worker moves to the other replica
    and resumes from the stored offset; the final log read raw equals the output exactly."""
    scene = Scene(cluster, replicas=2)
    try:
        shell, expected = lines_script(40, 0.15)
        worker = scene.worker("w1", f"{scene.url(0)},{scene.url(1)}")
        run_id = scene.run_task("stream-kill", shell, url=scene.url(1))
        first = scene.wait_attempt(run_id, 1, lambda a: a["log_end"] > 0, 30, "streamed")
        scene.controls[0].kill()
        # the stream goes on through the other replica
        scene.wait_attempt(run_id, 1, lambda a: a["log_end"] > first["log_end"]
                           or a["status"] in TERMINAL, 30, "streamed past the kill")
        assert wait_for(lambda: scene.run_status(run_id) in TERMINAL, 60), worker.log()
        (attempt,) = scene.attempts(run_id)
        assert attempt["status"] == "succeeded", (attempt, worker.log())
        body, gaps = read_all_raw(scene.url(1), scene.admin, attempt["id"])
        assert gaps == []
        assert body == expected, worker.log()[-3000:]
        assert attempt["log_rows"] is False  # the verified artifact replaced the rows
        assert f"switching to {scene.url(1)}" in worker.log(), worker.log()[-3000:]
    finally:
        scene.close()


def test_worker_sigkilled_mid_stream_the_attempt_ends_lost_and_logs_show_what_was_acked(
        scene: Scene) -> None:
    """A SIGKILLed worker's attempt ends ``lost`` after its lease; ``ql3 cluster logs`` prints
    every byte control acknowledged, then says it ended lost, and exits non-zero."""
    shell = 'echo "开始 第一行"; echo "第二行"; sleep 300'
    worker = scene.worker("w1")
    run_id = scene.run_task("worker-kill", shell)
    acked = "开始 第一行\n第二行\n".encode()
    row = scene.wait_attempt(run_id, 1, lambda a: a["log_end"] >= len(acked), 30,
                             "streamed both lines")
    worker.kill()
    scene.wait_attempt(run_id, 1, lambda a: a["status"] == "lost", LEASE_MS / 1000 + 20,
                       "lost")
    assert scene.chunk_bytes(row["id"]) == acked
    for args in (("logs", run_id), ("logs", run_id, "-f")):
        out = scene.cli(*args)
        assert out.stdout == acked, (args, out.stdout, out.stderr)
        err = out.stderr.decode()
        assert "attempt 1 ended lost: its log above may be incomplete" in err, (args, err)
        assert out.returncode != 0, (args, err)


def test_frozen_worker_resumes_its_late_chunks_get_409_and_nothing_is_appended(
        scene: Scene) -> None:
    """A worker frozen (SIGSTOP) past its lease: recovery settles its attempt ``lost``; on
    SIGCONT whatever it sends about that attempt is refused 409, and a chunk of the stale
    lease delivered late (a slow network: the worker's own last chunk request, replayed
    at the stored end) is answered 409 and never appended; the retry's log is its own."""
    flag = scene.cluster.tmp / "froze-once"
    shell = (f'if [ ! -e {flag} ]; then : > {flag}; echo "第一次 早"; sleep 2.5; '
             f'echo "第一次 迟"; sleep 300; else echo "第二次 自己的"; fi')
    proxy = LoopbackProxy(scene.url())
    try:
        w1 = scene.worker("w1", proxy.url)
        run_id = scene.run_task("frozen", shell, max_attempts=2)
        early = "第一次 早\n".encode()
        first = scene.wait_attempt(run_id, 1, lambda a: a["log_end"] >= len(early), 30,
                                   "streamed its first line")
        os.kill(w1.popen.pid, signal.SIGSTOP)
        try:
            scene.wait_attempt(run_id, 1, lambda a: a["status"] == "lost",
                               LEASE_MS / 1000 + 20, "lost")
            settled = scene.attempt(run_id, 1)
            scene.worker("w2")
            assert wait_for(lambda: scene.run_status(run_id) in TERMINAL, 40)
        finally:
            resumed_at = time.monotonic()
            os.kill(w1.popen.pid, signal.SIGCONT)
        # the resumed worker forgets its attempt; whatever it sends about it is refused
        assert wait_for(lambda: "attempt forgotten" in w1.log(), 10), w1.log()
        time.sleep(2.0)  # anything the resumed worker sends about it, it sends by now

        def about_old(r: dict[str, Any]) -> bool:
            body = r["request"] or {}
            leases = [c.get("lease") or {} for c in body.get("chunks") or []]
            leases.append(body.get("lease") or {})
            return any(lease.get("attempt_id") == first["id"] for lease in leases)

        late = [r for r in proxy.records() if r["at"] >= resumed_at and about_old(r)]
        for r in late:  # a batch answers 200 with a 409 per chunk; other writes 409
            if r["path"] == "/v1/worker/log-chunk" and r["status"] == 200:
                assert {x["status"] for x in r["answer"]["results"]} == {409}, r
            else:
                assert r["status"] == 409, r
        sent = [r for r in proxy.records("/v1/worker/log-chunk") if about_old(r)]
        assert sent, "the worker never streamed the first attempt"
        chunk = next(c for c in sent[-1]["request"]["chunks"]
                     if c["lease"]["attempt_id"] == first["id"])
        with scene.cluster.api(scene.url(), scene.worker_token) as stale:
            answer = stale.post("/v1/worker/log-chunk", json={"chunks": [{
                **chunk, "offset": len(early),
                "data": base64.b64encode("第一次 迟\n".encode()).decode()}]})
        assert answer.status_code == 200, answer.text
        assert answer.json()["results"][0]["status"] == 409, answer.text
    finally:
        proxy.close()
    old, new = scene.attempts(run_id)
    assert old == settled and old["id"] == first["id"]
    assert scene.chunk_bytes(old["id"]) == early
    assert new["status"] == "succeeded"
    body, _ = read_all_raw(scene.url(), scene.admin, new["id"])
    assert body == "第二次 自己的\n".encode()
    old_body, _ = read_all_raw(scene.url(), scene.admin, old["id"])
    assert old_body == early


def test_logs_follow_shows_chinese_lines_as_they_are_written_then_the_status_line(
        scene: Scene) -> None:
    """``ql3 cluster logs TASK@last -f`` on a running task prints each line while the task is
    still running and before the next is written (the task waits for a file the test
    creates only after the follower printed the line), then the status line; exit 0."""
    gate = scene.cluster.tmp / "gates"
    gate.mkdir()
    count = 4
    shell = "".join(f'echo "第{i}行 中文输出"; while [ ! -e {gate}/{i} ]; do sleep 0.05; done; '
                    for i in range(1, count + 1)) + 'echo "完"'
    scene.worker("w1")
    run_id = scene.run_task("follow-zh", shell)
    scene.wait_attempt(run_id, 1, lambda a: a["status"] == "running", 30, "running")
    env = scene.cluster.env(QL3_CONTROL_URL=scene.url(), QL3_TOKEN=scene.admin, COLUMNS="80")
    follower = subprocess.Popen([QL3, "cluster", "logs", "follow-zh@last", "-f"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen: list[bytes] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(follower.stdout.readline, b"")),
                              daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        for i in range(1, count + 1):
            line = f"第{i}行 中文输出\n".encode()
            assert wait_for(lambda line=line: line in seen, 15, 0.02), (i, seen)
            # the task is still blocked on this line's gate: the line arrived live
            assert scene.run_status(run_id) not in TERMINAL
            (gate / str(i)).touch()
        follower.wait(60)  # stdout is the reader thread's alone
        reader.join(10)
        err = follower.stderr.read()  # type: ignore[union-attr]
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait(10)
        for pipe in (follower.stdout, follower.stderr):
            if pipe is not None:
                pipe.close()
    assert b"".join(seen) == "".join(f"第{i}行 中文输出\n" for i in range(1, count + 1)
                                     ).encode() + "完\n".encode()
    lines = err.decode().strip().splitlines()
    assert lines and "succeeded (exit 0)" in lines[-1], err.decode()
    assert follower.returncode == 0


def test_secret_values_are_masked_in_chunks_raw_reads_and_the_stored_log(
        scene: Scene) -> None:
    """A task prints its secret variable's value in two writes with a pause between: the
    chunk rows in PostgreSQL, the raw read while it runs and the stored log show ``***``
    and never the value (docs/operations.md §9, cluster half); a plain variable's value is
    printed as is."""
    secret = "hunter2-ABCDEF-秘密"
    gate = scene.cluster.tmp / "secret-gate"
    shell = ('echo "开始 $PLAIN_VAR"; printf "key="; printf "%s" "$API_KEY" | head -c 6; '
             'sleep 1.5; printf "%s" "$API_KEY" | tail -c +7; echo " 完"; '
             f'while [ ! -e {gate} ]; do sleep 0.05; done; echo "结束 $API_KEY."')
    worker = scene.worker("w1")
    run_id = scene.run_task("secret-zh", shell, env={
        "API_KEY": {"value": secret, "secret": True},
        "PLAIN_VAR": {"value": "plain-visible", "secret": False}})
    masked_line = "开始 plain-visible\nkey=*** 完\n".encode()
    row = scene.wait_attempt(run_id, 1, lambda a: a["log_end"] >= len(masked_line), 30,
                             "streamed the masked line")
    live = raw_read(scene.url(), scene.admin, row["id"], offset=0)
    assert live.status_code == 200 and live.headers["QL3-Log-State"] == "running"
    assert live.content == masked_line, live.content
    rows = scene.chunk_bytes(row["id"])
    assert rows == masked_line and b"hunter" not in rows
    gate.touch()
    assert wait_for(lambda: scene.run_status(run_id) in TERMINAL, 30), worker.log()
    (attempt,) = scene.attempts(run_id)
    assert attempt["status"] == "succeeded", (attempt, worker.log())
    whole = masked_line + "结束 ***.\n".encode()
    body, _ = read_all_raw(scene.url(), scene.admin, attempt["id"])
    assert body == whole
    with scene.cluster.api(scene.url(), scene.admin) as api:
        stored = api.get(f"/v1/attempts/{attempt['id']}/log")
    assert stored.status_code == 200 and stored.content == whole, stored.content
    assert secret not in worker.log()


def test_secret_names_go_only_to_a_worker_that_claims_with_wire_2(scene: Scene) -> None:
    """``ClaimedAttempt.secret_names`` (docs/protocols.md §4.2 "Secret masking (worker)"):
    a claim without ``QL3-Wire: 2`` (an older worker, whose strict decoder refuses unknown
    fields) gets no such field; a claim with it gets the secret names, never a plain one."""
    import httpx

    env = {"API_KEY": {"value": "hunter2-ABCDEF", "secret": True},
           "PLAIN_VAR": {"value": "plain-visible", "secret": False}}
    http = httpx.Client(base_url=scene.url(), timeout=30,
                        headers={"Authorization": f"Bearer {scene.worker_token}"})
    try:
        r = http.post("/v1/worker/register", json={"name": "scripted", "labels": {"zone": "a"},
                                                   "concurrency": 4})
        assert r.status_code == 200, r.text
        incarnation = r.json()["incarnation_id"]

        def claim(headers: dict[str, str]) -> dict[str, Any]:
            def one() -> dict[str, Any] | None:
                r = http.post("/v1/worker/claim", headers=headers, json={
                    "incarnation_id": incarnation, "max_attempts": 1})
                assert r.status_code == 200, r.text
                got = r.json()["attempts"]
                return got[0] if got else None
            claimed = wait_for(one, 20, 0.2)
            assert claimed is not None
            return dict(claimed)

        scene.run_task("secret-old", "true", env=env)
        old = claim({})
        assert "secret_names" not in old and old["env"]["API_KEY"] == "hunter2-ABCDEF"
        scene.run_task("secret-new", "true", env=env)
        new = claim({"QL3-Wire": "2"})
        assert new["secret_names"] == ["API_KEY"]
        scene.run_task("plain-new", "true", env={"PLAIN_VAR": env["PLAIN_VAR"]})
        assert "secret_names" not in claim({"QL3-Wire": "2"})  # omitted when empty
        # a secret global variable in the pool's scope is masked too, unless the task's own
        # env overrides its name (then its value is not in the attempt's environment)
        with scene.cluster.api(scene.url(), scene.admin) as api:
            r = api.post("/v1/vars/GLOBAL_TOKEN", json={"value": "global-秘密-123456",
                                                        "secret": True})
            assert r.status_code < 300, r.text
            r = api.post("/v1/vars/GLOBAL_PLAIN", json={"value": "plain-global",
                                                        "secret": False})
            assert r.status_code < 300, r.text
        scene.run_task("global-new", "true", env={"PLAIN_VAR": env["PLAIN_VAR"]})
        got = claim({"QL3-Wire": "2"})
        assert got["secret_names"] == ["GLOBAL_TOKEN"]
        assert got["env"]["GLOBAL_TOKEN"] == "global-秘密-123456"
        scene.run_task("global-overridden", "true",
                       env={"GLOBAL_TOKEN": {"value": "mine", "secret": False}})
        assert "secret_names" not in claim({"QL3-Wire": "2"})
    finally:
        http.close()
