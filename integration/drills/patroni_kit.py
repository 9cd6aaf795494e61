"""An HA PostgreSQL cluster on loopback for the failover drill (SERVICES.md "HA PostgreSQL:
Patroni + etcd"): one etcd, three Patroni members (PostgreSQL 15), ``synchronous_mode`` on.

Everything lives under one temporary directory owned by ``postgres`` and listens on free
loopback ports of its own: the shared PostgreSQL on 5432 is never touched. Patroni runs as
``postgres`` (PostgreSQL refuses root) from a venv built by ``scripts/drill_env.sh`` from the
system Python. ``close`` stops what was started, by the pids started (and the postmasters
those Patroni processes started, read from their ``postmaster.pid``), then removes the
directory. Imported as a plain module (no pytest).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cluster_kit import PG_BIN, free_port, wait_for

PATRONI_VENV = Path(os.environ.get("QL3_PATRONI_VENV", "/var/cache/ql3-drill/patroni-venv"))
TTL_S = 20  # Patroni's floor: a crashed leader's key lives this long in etcd
LOOP_WAIT_S = 1
RETRY_TIMEOUT_S = 5  # loop_wait + 2 × retry_timeout ≤ ttl (Patroni's rule)
MEMBERS = 3


def missing_tools() -> str | None:
    """Why this machine cannot run the cluster (None when it can): root, the ``postgres``
    user, PostgreSQL 15's binaries, etcd and the Patroni venv (``scripts/drill_env.sh``)."""
    if os.geteuid() != 0:
        return "the failover drill needs root (Patroni runs as postgres)"
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return "no postgres user"
    for path in (PG_BIN / "postgres", Path(shutil.which("etcd") or "/nonexistent"),
                 PATRONI_VENV / "bin" / "patroni"):
        if not path.exists():
            return f"{path} is missing (run scripts/drill_env.sh)"
    return None


def _stop(popen: subprocess.Popen[bytes], timeout: float) -> None:
    """SIGTERM ``popen``, SIGKILL after ``timeout`` s; waits for it."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(10)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] not in ("Z", "X")
    except OSError:
        return False


@dataclass
class Member:
    """One Patroni member: its name, ports, directory and process."""

    name: str
    pg_port: int
    rest_port: int
    dir: Path
    popen: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def postmaster_pid(self) -> int | None:
        """The pid in ``postmaster.pid`` when that process is alive, else None."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def log(self) -> str:
        path = self.dir / "patroni.log"
        return path.read_text(errors="replace") if path.exists() else ""


class PatroniCluster:
    """etcd plus three Patroni members, bootstrapped to one leader and two streaming
    replicas with ``synchronous_mode`` on (a commit is acknowledged only once the
    synchronous standby has flushed it, and only that standby may be promoted: no
    acknowledged commit is lost in a failover). ``hosts`` is "127.0.0.1:P1,…" and
    ``conninfo_params`` the query that makes a libpq client follow the leader."""

    conninfo_params = "target_session_attrs=read-write&connect_timeout=2"

    def __init__(self) -> None:
        why = missing_tools()
        if why:
            raise RuntimeError(why)
        self.dir = Path(tempfile.mkdtemp(prefix="ql3-drill-ha-"))  # postgres must cross it
        shutil.chown(self.dir, "postgres", "postgres")
        self.scope = f"ql3drill-{secrets.token_hex(4)}"
        self.etcd_port, self._etcd_peer = free_port(), free_port()
        self.members = [Member(f"m{i}", free_port(), free_port(), self.dir / f"m{i}")
                        for i in range(1, MEMBERS + 1)]
        self._etcd: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{m.pg_port}" for m in self.members)

    def start(self, timeout: float = 90) -> None:
        """Start etcd and the members; wait for a leader, two streaming replicas and a
        synchronous standby. RuntimeError with the members' logs after ``timeout`` s."""
        self._start_etcd()
        for member in self.members:
            self._start_member(member)
        if not wait_for(self._settled, timeout, 0.5):
            raise RuntimeError(f"Patroni cluster did not settle: {self.topology()}\n"
                               + "\n".join(m.log()[-3000:] for m in self.members))

    def _start_etcd(self) -> None:
        data = self.dir / "etcd"
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self._etcd_peer}"
        with open(self.dir / "etcd.log", "ab") as log:
            self._etcd = subprocess.Popen(
                ["etcd", "--name", "e1", "--data-dir", str(data),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", f"e1={peer}", "--initial-cluster-state", "new",
                 "--initial-cluster-token", self.scope],
                stdout=log, stderr=log, start_new_session=True)

        def healthy() -> bool:
            try:
                return httpx.get(f"{client}/health", timeout=1).json().get("health") == "true"
            except (httpx.HTTPError, ValueError):
                return False

        if not wait_for(healthy, 30, 0.2):
            raise RuntimeError("etcd did not become healthy: "
                               + (self.dir / "etcd.log").read_text(errors="replace")[-2000:])

    def _config(self, m: Member) -> dict[str, Any]:
        hba = ["local all all trust", "local replication all trust",
               "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"]
        return {
            "scope": self.scope, "namespace": "/ql3-drill/", "name": m.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{m.rest_port}",
                        "connect_address": f"127.0.0.1:{m.rest_port}"},
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {"ttl": TTL_S, "loop_wait": LOOP_WAIT_S,
                        "retry_timeout": RETRY_TIMEOUT_S,
                        "maximum_lag_on_failover": 1 << 20,
                        "synchronous_mode": True, "synchronous_node_count": 1,
                        "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                       "parameters": {"wal_log_hints": "on",
                                                      "max_connections": 100,
                                                      "shared_buffers": "16MB",
                                                      "synchronous_commit": "on"}}},
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": hba,
            },
            "postgresql": {
                "listen": f"127.0.0.1:{m.pg_port}", "connect_address": f"127.0.0.1:{m.pg_port}",
                "data_dir": str(m.data_dir), "bin_dir": str(PG_BIN),
                "pgpass": str(m.dir / "pgpass"),
                "authentication": {"superuser": {"username": "postgres"},
                                   "replication": {"username": "replicator"},
                                   "rewind": {"username": "postgres"}},
                "parameters": {"unix_socket_directories": str(m.dir)},
                "pg_hba": hba,
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }

    def _start_member(self, m: Member) -> None:
        m.dir.mkdir()
        shutil.chown(m.dir, "postgres", "postgres")
        config = m.dir / "patroni.yml"  # JSON is YAML
        config.write_text(json.dumps(self._config(m), indent=1))
        shutil.chown(config, "postgres", "postgres")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(m.dir), "LANG": "C.UTF-8"}
        log = open(m.dir / "patroni.log", "ab")  # noqa: SIM115 (kept by the child)
        try:
            m.popen = subprocess.Popen(
                [str(PATRONI_VENV / "bin" / "patroni"), str(config)], cwd=m.dir, env=env,
                user="postgres", group="postgres", extra_groups=[], stdout=log, stderr=log,
                start_new_session=True)
        finally:
            log.close()

    def topology(self) -> list[dict[str, Any]]:
        """Patroni's view of the members (``GET /cluster`` of the first member that
        answers): name, role (leader, sync_standby, replica), state, timeline."""
        for m in self.members:
            if m.popen is None or m.popen.poll() is not None:
                continue
            try:
                body = httpx.get(f"{m.rest}/cluster", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                continue
            return [{k: x.get(k) for k in ("name", "role", "state", "timeline")}
                    for x in body.get("members", [])]
        return []

    def _settled(self) -> bool:
        roles = sorted((x["role"], x["state"]) for x in self.topology())
        return roles == [("leader", "running"), ("replica", "streaming"),
                         ("sync_standby", "streaming")]

    def leader(self) -> Member | None:
        """The member Patroni names leader, if any."""
        names = [x["name"] for x in self.topology() if x["role"] == "leader"]
        return next((m for m in self.members if m.name in names), None)

    def crash(self, member: Member) -> None:
        """A node crash: SIGKILL its Patroni, then its postmaster (its backends notice the
        postmaster's death and exit). Nothing is shut down cleanly; its leader key in
        etcd lives until the ttl ends."""
        pid = member.postmaster_pid()
        if member.popen is not None and member.popen.poll() is None:
            member.popen.send_signal(signal.SIGKILL)
            member.popen.wait(10)
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop the members (Patroni stops its PostgreSQL), then etcd; SIGKILL what
        remains of the postmasters they started; remove the directory."""
        try:
            running = [m.popen for m in self.members
                       if m.popen is not None and m.popen.poll() is None]
            for popen in running:  # all at once: the members' shutdowns overlap
                popen.send_signal(signal.SIGTERM)
            for popen in running:
                _stop(popen, 30)
            for m in self.members:
                pid = m.postmaster_pid()
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    wait_for(lambda p=pid: not _alive(p), 10, 0.1)
            if self._etcd is not None:
                _stop(self._etcd, 10)
        finally:
            time.sleep(0.2)
            shutil.rmtree(self.dir, ignore_errors=True)
