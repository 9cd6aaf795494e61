"""Rolling upgrade (DESIGN.md §4.1; docs/protocols.md §4.6): three real
``ql3 control serve`` replicas of release N and a worker run an every-second task; release
N+1's ``ql3 control migrate`` (``next_release.py expand``: one more, additive migration that
adds ``worker_pools.last_claim_at``, and UPDATE on ``worker_pools`` for the runtime role) runs
as the schema owner while they serve. The N replicas stay ready (``/readyz`` polled every
0.2 s: 200 throughout) and keep firing, claiming and completing; then each is replaced by an
N+1 replica on its port (SIGTERM, drained exit 0, start, ready) while the task runs. At the
end, from the database: every slot exactly once in the occurrence ledger, every run
terminal and succeeded, every attempt exactly one outcome, every run one end, and the new
column written by N+1 claims only (NULL while N alone served). A task streaming its output
live (docs/protocols.md §4.9) runs across the whole roll: its log, read raw at the end, is
every line once, in order, with no gap.

The negative: a non-additive (contract) migration ahead of release N makes an N replica
answer 503 ``schema_newer_than_code``, ``ql3 control readiness`` exit 1 with that reason, and
N's ``migrate`` refuse.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections import Counter
from datetime import datetime
from typing import Any

import httpx
import pytest
from cluster_kit import QL3, Cluster, Proc, wait_for
from live_log_kit import read_all_raw
from next_release import NEW_COLUMN, command, next_file_name
from slot_ledger import assert_every_slot_once, read_ledger

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.drill]

EXPAND, CONTRACT = command("expand"), command("contract")
TERMINAL = {"succeeded", "failed", "lost", "cancelled", "timed_out"}
READINESS_PERIOD_S = 2.0  # serve/replica.py: how often a replica re-checks readiness


class ReadyWatch:
    """Polls ``/readyz`` of every replica it is told serves, every 0.2 s, in a thread of the
    test; counts the polls per replica and keeps every answer that is not 200 (a refused
    connection included). A replica is withdrawn before it is stopped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._serving: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.polls: Counter[str] = Counter()
        self.failures: list[tuple[str, str]] = []

    def serve(self, proc: Proc) -> None:
        with self._lock:
            self._serving[proc.name] = proc.url or ""

    def withdraw(self, proc: Proc) -> None:
        with self._lock:
            self._serving.pop(proc.name, None)

    def polled(self) -> Counter[str]:
        with self._lock:
            return Counter(self.polls)

    def __enter__(self) -> ReadyWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=2) as client:
            while not self._stop.wait(0.2):
                with self._lock:
                    targets = dict(self._serving)
                for name, url in targets.items():
                    try:
                        answer = client.get(f"{url}/readyz")
                        status, body = answer.status_code, answer.text
                    except httpx.HTTPError as exc:
                        status, body = 0, repr(exc)
                    with self._lock:
                        if name not in self._serving:
                            continue  # withdrawn while the request was in flight
                        self.polls[name] += 1
                        if status != 200:
                            self.failures.append((name, f"{status} {body[:300]}"))


def _db(cluster: Cluster, query: str, *params: Any) -> Any:
    with cluster.db.connect() as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


def _progress(cluster: Cluster, task_id: str) -> tuple[int, int]:
    """(slots with an outcome, attempts succeeded) of the task so far."""
    with cluster.db.connect() as conn:
        row = conn.execute(
            "SELECT (SELECT coalesce(sum(slot_count), 0) FROM occurrences WHERE task_id = %s),"
            " (SELECT count(*) FROM attempts a JOIN runs r ON r.id = a.run_id"
            "  WHERE r.task_id = %s AND a.status = 'succeeded')", (task_id, task_id)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def _advances(cluster: Cluster, task_id: str, procs: list[Proc], by: int = 3) -> None:
    """Wait until ``by`` more slots were fired and ``by`` more attempts succeeded."""
    slots, done = _progress(cluster, task_id)
    moved = wait_for(lambda: all(after >= before + by for before, after in
                                 zip((slots, done), _progress(cluster, task_id),
                                     strict=True)), 45, 0.25)
    assert moved, (_progress(cluster, task_id), [p.log()[-1500:] for p in procs])


def _stream_end(cluster: Cluster, run_id: str) -> int:
    """Bytes of the run's first attempt control has acknowledged so far (attempts.log_end;
    0 before it is claimed)."""
    with cluster.db.connect() as conn:
        row = conn.execute("SELECT coalesce(max(log_end), 0) FROM attempts WHERE run_id = %s",
                           (run_id,)).fetchone()
    assert row is not None
    return int(row[0])


def _port(proc: Proc) -> int:
    port = urllib.parse.urlsplit(proc.url or "").port
    assert port is not None
    return port


def _new_column_of_pool(cluster: Cluster) -> datetime | None:
    value: datetime | None = _db(
        cluster, f"SELECT {NEW_COLUMN} FROM worker_pools WHERE name = 'p1'")
    return value


def _migrate(cluster: Cluster, release: tuple[str, ...], *, check: bool = True) -> Any:
    return cluster.ql3("control", "migrate", "--database-url", cluster.db.owner_url,
                       "--runtime-role", cluster.db.runtime_role, "--json",
                       command=release, check=check)


def _readiness_of_n(cluster: Cluster) -> tuple[int, dict[str, Any]]:
    """``ql3 control readiness --json`` of release N as the replicas' login."""
    out = cluster.ql3("control", "readiness", "--database-url", cluster.db.runtime_url,
                      "--runtime-role", cluster.db.runtime_role, "--json", check=False)
    return out.returncode, json.loads(out.stdout)


def test_n_replicas_stay_ready_through_an_expand_step_and_roll_to_n_plus_1_losing_nothing(
        cluster: Cluster) -> None:
    admin = cluster.token("admin")
    controls = [cluster.start_control(name, wait=False) for name in ("c1", "c2", "c3")]
    for control in controls:
        cluster.wait_ready(control)
    # the worker knows every replica's address; a replacement takes its predecessor's port
    worker = cluster.start_worker("w1", cluster.token("worker", pool="p1"),
                                  ",".join(c.url or "" for c in controls), concurrency=4)
    with cluster.api(controls[1].url or "", admin) as api:
        r = api.post("/v1/tasks", json={"name": "tick", "argv": ["sleep", "1"],
                                        "schedule": "* * * * * *",
                                        "concurrency_policy": "allow"})
        assert r.status_code == 201, r.text
        task_id = str(r.json()["id"])
        # a task streaming its output live across the whole roll (protocols §4.9)
        stop = cluster.tmp / "stream-stop"
        r = api.post("/v1/tasks", json={"name": "stream", "max_attempts": 1, "shell": (
            f'i=1; while [ ! -e {stop} ]; do echo "流 $i 行"; i=$((i+1)); sleep 0.2; done; '
            'echo "流 完"')})
        assert r.status_code == 201, r.text
        r = api.post("/v1/tasks/stream/run")
        assert r.status_code == 201, r.text
        stream_run = str(r.json()["id"])
    expand_name = next_file_name("expand")
    serving = list(controls)

    with ReadyWatch() as watch:
        for control in controls:
            watch.serve(control)
        _advances(cluster, task_id, [*serving, worker])

        # release N+1's migrate, as the schema owner, while N serves
        assert json.loads(_migrate(cluster, EXPAND).stdout) == {
            "applied": [expand_name], "ahead": []}
        assert _db(cluster, "SELECT has_table_privilege(%s, 'worker_pools', 'UPDATE')",
                   cluster.db.runtime_role) is True
        migrated_at = time.monotonic()
        code, verdict = _readiness_of_n(cluster)
        assert (code, verdict["ready"], verdict["schema_ahead_by"]) == (0, True, [expand_name])
        polled = watch.polled()
        _advances(cluster, task_id, [*serving, worker])  # N fires, claims, completes
        time.sleep(max(0.0, 2 * READINESS_PERIOD_S - (time.monotonic() - migrated_at)))
        assert all(watch.polled()[c.name] >= polled[c.name] + 5 for c in controls), \
            watch.polled()
        assert _new_column_of_pool(cluster) is None  # release N never touches it

        streamed_before_roll = wait_for(lambda: _stream_end(cluster, stream_run), 30, 0.1)
        assert streamed_before_roll > 0, worker.log()[-3000:]
        # roll: one at a time, SIGTERM (drain), N+1 on the same port, ready, work goes on
        for old in controls:
            watch.withdraw(old)
            serving.remove(old)
            assert old.terminate() == 0, old.log()[-3000:]
            new = cluster.start_control(f"{old.name}-next", port=_port(old), command=EXPAND)
            watch.serve(new)
            serving.append(new)
            _advances(cluster, task_id, [*serving, worker])
        rolled_at: datetime = _db(cluster, "SELECT now()")
        code, verdict = _readiness_of_n(cluster)  # N's view is unchanged by the roll
        assert (code, verdict["schema_ahead_by"]) == (0, [expand_name]), verdict
        stamped = wait_for(lambda: (_new_column_of_pool(cluster) or rolled_at) > rolled_at,
                           30, 0.25)
        assert stamped, [p.log()[-1500:] for p in serving]

        stop.touch()  # the streaming task ends; its log is whole, in order, no gap
        assert wait_for(lambda: _db(cluster, "SELECT status FROM runs WHERE id = %s",
                                    stream_run) in TERMINAL, 30), worker.log()[-3000:]
        assert _db(cluster, "SELECT status FROM runs WHERE id = %s", stream_run) \
            == "succeeded"
        attempt_id = _db(cluster, "SELECT id::text FROM attempts WHERE run_id = %s",
                         stream_run)
        body, gaps = read_all_raw(serving[0].url or "", admin, attempt_id)
        lines = body.decode().splitlines()
        assert gaps == [] and lines[-1] == "流 完", (gaps, lines[-3:])
        assert lines[:-1] == [f"流 {i} 行" for i in range(1, len(lines))], lines[:5]
        assert len(body) > streamed_before_roll
        with cluster.api(serving[0].url or "", admin) as api:
            assert api.post("/v1/tasks/tick/disable").status_code == 200
        disabled_at: datetime = _db(cluster, "SELECT now()")
        assert wait_for(lambda: _db(
            cluster, "SELECT count(*) FROM runs WHERE task_id = %s AND status <> ALL(%s)",
            task_id, list(TERMINAL)) == 0, 45, 0.25), worker.log()[-3000:]
        polls = watch.polled()
    assert worker.terminate() == 0, worker.log()[-3000:]
    for control in serving:
        assert control.terminate() == 0, control.log()[-3000:]

    assert not watch.failures, watch.failures[:5]
    assert all(polls[c.name] >= 10 for c in serving), polls  # each N+1 replica was watched
    outcomes = assert_every_slot_once(read_ledger(cluster, task_id), disabled_at, 15)
    assert outcomes["run_created"] >= 10, outcomes
    with cluster.db.connect() as conn:
        runs = Counter(s for (s,) in conn.execute(
            "SELECT status FROM runs WHERE task_id = %s", (task_id,)).fetchall())
        attempt_ends = Counter(a for (a,) in conn.execute(
            "SELECT e.attempt_id::text FROM events e JOIN runs r ON r.id = e.run_id"
            " WHERE r.task_id = %s AND e.kind IN ('attempt_completed', 'attempt_lost')",
            (task_id,)).fetchall())
        attempts = {a for (a,) in conn.execute(
            "SELECT a.id::text FROM attempts a JOIN runs r ON r.id = a.run_id"
            " WHERE r.task_id = %s", (task_id,)).fetchall()}
        run_ends = Counter(r for (r,) in conn.execute(
            "SELECT e.run_id::text FROM events e JOIN runs r ON r.id = e.run_id"
            " WHERE r.task_id = %s AND e.kind IN ('run_finished', 'run_lost')",
            (task_id,)).fetchall())
    assert set(runs) == {"succeeded"}, runs  # nothing lost, failed or left behind
    assert set(attempt_ends) == attempts and set(attempt_ends.values()) == {1}, \
        attempt_ends.most_common(3)
    assert len(run_ends) == runs.total() and set(run_ends.values()) == {1}


def test_a_contract_step_ahead_of_release_n_makes_it_not_ready(cluster: Cluster) -> None:
    control = cluster.start_control("c1")
    contract_name = next_file_name("contract")
    assert json.loads(_migrate(cluster, CONTRACT).stdout) == {
        "applied": [contract_name], "ahead": []}

    def readyz() -> httpx.Response:
        return httpx.get(f"{control.url}/readyz", timeout=5)

    assert wait_for(lambda: readyz().status_code == 503, 3 * READINESS_PERIOD_S), \
        control.log()[-2000:]
    assert readyz().json()["reasons"] == ["schema_newer_than_code"]
    code, verdict = _readiness_of_n(cluster)
    assert (code, verdict["ready"], verdict["reason"]) == (1, False, "schema_newer_than_code")
    assert contract_name in verdict["detail"]
    refused = _migrate(cluster, (QL3,), check=False)
    assert refused.returncode != 0 and contract_name in refused.stderr, refused.stderr
    assert control.terminate() == 0, control.log()[-2000:]
