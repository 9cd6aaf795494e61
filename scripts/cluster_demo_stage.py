"""The stage of the cluster demo (``scripts/cluster_demo.py``): everything it starts on this
machine and stops again, and the facts it reads to check what happened.

Built on the integration tier's cluster kit (``integration/cluster/cluster_kit.py``: a fresh
database migrated by ``ql3 control migrate`` with its own runtime and login roles, real
``ql3 control serve`` and ``ql3 worker run`` processes) and its S3 helpers
(``integration/s3/s3_services.py``: moto's server as a subprocess on a free port). Every
process is started in a session of its own, so a Ctrl-C on the terminal reaches only the demo,
which then stops them by pid (the ``ExitStack`` given to ``Stage.start``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _dir in (ROOT / "integration", ROOT / "integration" / "cluster", ROOT / "integration" / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

import psycopg  # noqa: E402
from cluster_kit import LOCAL_PG, QL3, Cluster, ClusterDb, Proc, pg_url, wait_for  # noqa: E402
from s3_services import CREDS, moto_server, new_bucket  # noqa: E402

LEASE_MS, HEARTBEAT_MS = 3000, 1000  # a SIGKILLed worker's lease is recovered within seconds
ACTIVE = ("queued", "dispatching", "running")

__all__ = ["ACTIVE", "QL3", "ROOT", "Proc", "Stage", "StageError", "marked_pids", "wait_for"]


class StageError(RuntimeError):
    """A service of the demo could not be started (PostgreSQL down and not startable, a
    replica never ready); the message says which."""


def postgres_ready(server: str = LOCAL_PG) -> bool:
    """True when ``postgres`` can log in to ``server`` ("host:port", trust auth)."""
    try:
        with psycopg.connect(pg_url("postgres", "postgres", server), connect_timeout=3):
            return True
    except psycopg.Error:
        return False


def ensure_postgres() -> str:
    """Make sure the machine's PostgreSQL answers at 127.0.0.1:5432, starting the Debian
    cluster as ``scripts/test.sh`` does when it does not; what was done ("running" or
    "started"). Raises StageError when it still does not answer after 10 s."""
    if postgres_ready():
        return "running"
    versions = sorted(os.listdir("/etc/postgresql")) if os.path.isdir("/etc/postgresql") else []
    if not versions or shutil.which("pg_ctlcluster") is None:
        raise StageError("PostgreSQL does not answer at 127.0.0.1:5432 and there is no "
                         "Debian cluster to start (pg_ctlcluster)")
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", versions[-1], "main",
                    "start"], capture_output=True, timeout=60, check=False)
    if not wait_for(postgres_ready, 10, 0.2):
        raise StageError("PostgreSQL did not come up at 127.0.0.1:5432 (pg_ctlcluster start)")
    return "started"


def marked_pids(marker: str) -> set[int]:
    """Live (non-zombie) pids whose command line holds ``marker``, read from ``/proc``."""
    needle = marker.encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                cmdline = fh.read()
            with open(f"/proc/{name}/stat") as fh:
                state = fh.read().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if needle in cmdline and state not in ("Z", "X"):
            found.add(int(name))
    return found


@dataclass
class Stage:
    """The running cluster: the moto endpoint and bucket, the database, two replicas
    (``controls``), two workers (``workers``; ``prefers``: the replica each talks to first),
    an admin token, an owner connection ``db`` for the checks."""

    cluster: Cluster
    admin_token: str
    controls: dict[str, Proc]
    workers: dict[str, Proc]
    prefers: dict[str, str]
    db: psycopg.Connection[Any]
    markers: list[str]

    @classmethod
    def start(cls, stack: ExitStack, say: Any) -> Stage:
        """Start everything, narrating each step through ``say(text)``; each thing started
        is pushed on ``stack`` as it starts, so closing the stack (also after a failure
        here) stops the processes by pid (SIGTERM, then SIGKILL), drops the database and
        its roles and removes the temp directory."""
        say(f"PostgreSQL at {LOCAL_PG}: {ensure_postgres()}")
        tmp = Path(tempfile.mkdtemp(prefix="ql3-cluster-demo-"))
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        say(f"temp dir {tmp} (process logs, worker spools)")
        endpoint = stack.enter_context(moto_server())
        from qinglong.control.retention.objects import make_client

        bucket = new_bucket(make_client(endpoint, timeout_s=5, **CREDS), versioned=True)
        say(f"S3 emulator (moto) at {endpoint}, versioned bucket {bucket}")
        db = ClusterDb.create()
        stack.callback(db.drop)
        say(f"database {db.name} migrated by `ql3 control migrate`; replicas log in as "
            f"{db.login_role}, a member of the runtime role {db.runtime_role}")
        cluster = Cluster(tmp, db, endpoint, bucket)
        stack.callback(cluster.close)
        admin = cluster.token("admin", name="demo-admin")
        pool = cluster.token("worker", pool="default", labels="zone=a", name="demo-pool")
        say("tokens from `ql3 control token create`: admin (for you), worker pool 'default'")
        controls = {name: cluster.start_control(name, lease_ms=LEASE_MS,
                                                heartbeat_ms=HEARTBEAT_MS, wait=False)
                    for name in ("c1", "c2")}
        for proc in controls.values():
            try:
                cluster.wait_ready(proc, timeout=60)
            except AssertionError as exc:
                raise StageError(str(exc)[-2000:]) from None
        say("control replicas " + ", ".join(f"{n} at {p.url}" for n, p in controls.items())
            + f" ready (lease {LEASE_MS // 1000} s, heartbeat {HEARTBEAT_MS // 1000} s)")
        c1, c2 = (str(p.url) for p in controls.values())
        workers = {
            "w1": cluster.start_worker("w1", pool, f"{c1},{c2}", "--drain-budget", "5",
                                       concurrency=1, labels="zone=a"),
            "w2": cluster.start_worker("w2", pool, f"{c2},{c1}", "--drain-budget", "5",
                                       concurrency=1, labels="zone=a")}
        say("workers w1 (c1 first, then c2) and w2 (c2 first, then c1), one attempt at a "
            "time each, holding only the pool token")
        conn = db.connect()
        stack.callback(conn.close)
        stage = cls(cluster, admin, controls, workers, {"w1": "c1", "w2": "c2"}, conn, [])
        stack.callback(stage._kill_marked)
        return stage

    def marker(self) -> str:
        """A new 9-digit marker for the command lines of one task's processes; any still
        alive when the stage closes are killed."""
        marker = f"{secrets.randbelow(10**9):09d}"
        self.markers.append(marker)
        return marker

    def _kill_marked(self) -> None:
        for marker in self.markers:
            for pid in marked_pids(marker):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def control_urls(self, first: str | None = None) -> str:
        """Both replicas' base URLs, comma-separated, ``first`` (a replica name) first."""
        names = sorted(self.controls, key=lambda n: n != first)
        return ",".join(str(self.controls[n].url) for n in names)

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        """The rows of one query on the demo's database (as the owner), as dicts."""
        cur = self.db.execute(sql, params)
        cols = [c.name for c in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def attempts(self, task: str | None = None) -> list[dict[str, Any]]:
        """Every attempt (of ``task``'s runs) with its run, task, number, status, reason,
        bundle digest and worker name, oldest first."""
        return self.rows(
            "SELECT a.id::text AS id, a.run_id::text AS run_id, t.name AS task, r.number "
            "AS run_number, a.number, a.status, a.reason, r.status AS run_status, "
            "a.bundle_digest, "
            "i.name AS worker FROM attempts a JOIN runs r ON r.id = a.run_id "
            "JOIN tasks t ON t.id = r.task_id "
            "LEFT JOIN worker_incarnations i ON i.id = a.worker_incarnation_id "
            "WHERE %s::text IS NULL OR t.name = %s ORDER BY a.created_at", task, task)

    def run_statuses(self) -> dict[str, int]:
        """How many runs are in each status."""
        return {r["status"]: r["n"] for r in self.rows(
            "SELECT status, count(*)::int AS n FROM runs GROUP BY status")}

    def log_tails(self, lines: int = 15) -> str:
        """The last ``lines`` lines of every process's log, for a failure report."""
        parts = []
        for proc in self.cluster.procs:
            tail = proc.log().splitlines()[-lines:]
            parts.append(f"--- {proc.name} (last {len(tail)} lines)\n" + "\n".join(tail))
        return "\n".join(parts)
