"""A cluster on this machine for the integration tier (docs/protocols.md §4): a fresh database on
the local PostgreSQL with its own runtime and login roles, moto's S3 server over real HTTP,
real ``ql3 control serve`` replicas and real ``ql3 worker run`` processes. Every process
started here is stopped by ``Cluster.close``; every role and database is dropped.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg

from harness import (
    free_port,  # the one harness's (integration/harness.py)
    wait_for,
)

if TYPE_CHECKING:
    from pg_reaper import Reaper

QL3 = str(Path(sys.executable).parent / "ql3")
LOCAL_PG = "127.0.0.1:5432"  # the machine's PostgreSQL
PG_BIN = Path("/usr/lib/postgresql/15/bin")
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
         "AWS_DEFAULT_REGION": "us-east-1"}


def pg_url(user: str, db: str, server: str = LOCAL_PG, params: str = "") -> str:
    """A trust-auth URL of ``user`` on ``db`` at ``server`` ("host:port", or several
    "h1:p1,h2:p2" for an HA cluster) with the query ``params`` ("k=v&k2=v2", may be empty)."""
    return f"postgresql://{user}@{server}/{db}" + (f"?{params}" if params else "")


def _admin(server: str = LOCAL_PG, params: str = "") -> psycopg.Connection[Any]:
    return psycopg.connect(pg_url("postgres", "postgres", server, params), autocommit=True,
                           connect_timeout=10)


@dataclass
class ClusterDb:
    """A migrated database; ``runtime_url`` logs in as a role that is a member of the
    runtime role and nothing more (what ``serve`` must use)."""

    name: str
    runtime_role: str
    login_role: str
    server: str = LOCAL_PG
    params: str = ""  # URL query, e.g. "target_session_attrs=read-write" for an HA cluster

    @property
    def owner_url(self) -> str:
        return pg_url("postgres", self.name, self.server, self.params)

    @property
    def runtime_url(self) -> str:
        return pg_url(self.login_role, self.name, self.server, self.params)

    @classmethod
    def create(cls, server: str = LOCAL_PG, params: str = "",
               template: ClusterDb | None = None,
               command: Sequence[str] = (QL3,)) -> ClusterDb:
        """A new database on ``server`` ("host:port", or "h1:p1,h2:p2,…" with ``params``
        naming ``target_session_attrs=read-write``; trust auth for ``postgres``), migrated
        by ``ql3 control migrate`` with its own runtime role and a login in it.

        With ``template`` (a migrated database on the same server nobody is connected to,
        ``ClusterDb.template``), the database is a ``CREATE DATABASE … TEMPLATE`` copy of it
        instead: the template's runtime role loses what it was granted there
        (``DROP OWNED BY``) and this database's own runtime role gets the runtime grants
        (``db.roles.apply_runtime_grants``, what the migrate ends with) — the same schema
        and grants as a migrate, without running the migrations again.

        ``command`` runs instead of ``ql3`` for the migrate (another build's, whose
        migration files may differ from this checkout's: its ``control serve`` accepts
        only a database its own migrations made)."""
        suffix = secrets.token_hex(5)
        db = cls(f"ql3c_{suffix}", f"ql3c_rt_{suffix}", f"ql3c_login_{suffix}", server,
                 params)
        if template is None:
            with _admin(server, params) as conn:
                conn.execute(f'CREATE DATABASE "{db.name}"')
            subprocess.run([*command, "control", "migrate", "--database-url", db.owner_url,
                            "--runtime-role", db.runtime_role], check=True,
                           capture_output=True, timeout=60)
        else:
            assert (template.server, template.params) == (server, params)
            with _admin(server, params) as conn:
                conn.execute(f'CREATE DATABASE "{db.name}" TEMPLATE "{template.name}"')
            db.grant_runtime(revoke_from=template.runtime_role)
        with _admin(server, params) as conn:
            conn.execute(f'CREATE ROLE "{db.login_role}" LOGIN IN ROLE "{db.runtime_role}"')
        return db

    @classmethod
    def template(cls, server: str = LOCAL_PG) -> ClusterDb:
        """A migrated database for ``create(template=…)``: ``create`` without its login role
        (nobody may connect to a template while it is copied); ``drop`` removes it."""
        db = cls.create(server)
        with _admin(server) as conn:
            conn.execute(f'DROP ROLE "{db.login_role}"')
        return db

    def grant_runtime(self, *, revoke_from: str) -> None:
        """In this database: revoke everything ``revoke_from`` was granted (it owns nothing)
        and apply the runtime grants to ``runtime_role`` (created if missing)."""
        from qinglong.control.db.engine import create_engine
        from qinglong.control.db.roles import apply_runtime_grants

        engine = create_engine(self.owner_url, pool_size=1, max_overflow=0)
        try:
            with engine.connect() as conn, conn.begin():
                conn.exec_driver_sql(f'DROP OWNED BY "{revoke_from}"')
                apply_runtime_grants(conn, self.runtime_role)
        finally:
            engine.dispose()

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.owner_url, autocommit=True, connect_timeout=10)

    def drop(self) -> None:
        with _admin(self.server, self.params) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            conn.execute(f'DROP ROLE IF EXISTS "{self.login_role}"')
            conn.execute(f'DROP ROLE IF EXISTS "{self.runtime_role}"')


class PrivatePostgres:
    """A PostgreSQL server of its own for tests that stop, crash or
    restart the database: ``initdb`` in a fresh directory, run as user ``postgres`` through
    ``runuser`` (PostgreSQL refuses root), listening on 127.0.0.1 at a free port. ``start``,
    ``stop`` (``mode`` "immediate" is a crash: no shutdown checkpoint, clients cut off) and
    ``close`` (stop and remove the directory); ``server`` is "host:port" for ``ClusterDb``."""

    def __init__(self) -> None:
        if os.geteuid() != 0 or shutil.which("runuser") is None \
                or not (PG_BIN / "initdb").exists():
            raise RuntimeError("a private PostgreSQL needs root, runuser and "
                               f"{PG_BIN}/initdb")
        self.dir = Path(tempfile.mkdtemp(prefix="ql3-pg-"))  # not under pytest's 0700 tmp
        shutil.chown(self.dir, "postgres", "postgres")
        self.port = free_port()
        self.server = f"127.0.0.1:{self.port}"
        self._pg("initdb", "-D", str(self.dir / "data"), "-U", "postgres", "--auth=trust",
                 "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")

    def _pg(self, tool: str, *args: str) -> None:
        out = subprocess.run(["runuser", "-u", "postgres", "--", str(PG_BIN / tool), *args],
                             capture_output=True, text=True, timeout=60, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"{tool} exited {out.returncode}: {out.stderr or out.stdout}")

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        self._pg("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"),
                 "-o", f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} "
                       "-c fsync=off", "-w", "-t", "30", "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m mode`` (smart, fast, immediate) and wait until it is down."""
        self._pg("pg_ctl", "-D", str(self.dir / "data"), "-m", mode, "-w", "-t", "30",
                 "stop")

    def running(self) -> bool:
        return (self.dir / "data" / "postmaster.pid").exists()

    def close(self) -> None:
        """Stop (immediately) if running and remove the directory."""
        try:
            if self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@dataclass
class Proc:
    """One started ``ql3`` process and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    url: str | None = None
    worker: bool = False  # a ``ql3 worker run`` (``Cluster.start_worker``)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.alive():
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM and wait; SIGKILL after ``timeout`` s. Returns the exit code."""
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        return int(self.popen.returncode)


@dataclass
class Cluster:
    """Control replicas and workers on one database and one bucket."""

    tmp: Path
    db: ClusterDb
    s3_endpoint: str
    bucket: str
    procs: list[Proc] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("QL3_", "AWS_"))}
        env.update(CREDS)
        env.update(extra)
        return env

    def ql3(self, *args: str, check: bool = True, timeout: float = 60,
            command: Sequence[str] = (QL3,)) -> subprocess.CompletedProcess[str]:
        """``ql3 args`` (or ``command`` instead of ``ql3``, e.g. ``next_release.command``);
        AssertionError with its stderr on a non-zero exit when ``check``."""
        out = subprocess.run([*command, *args], env=self.env(), capture_output=True,
                             text=True, timeout=timeout, check=False)
        if check and out.returncode != 0:
            raise AssertionError(f"ql3 {args[:3]} exited {out.returncode}: {out.stderr}")
        return out

    def token(self, scope: str, *, pool: str | None = None,
              labels: str | None = None, name: str | None = None) -> str:
        """A new token of ``scope`` (a worker token in ``pool`` with the pool's ``labels``
        "k=v,..."), issued by ``ql3 control token create`` as the schema owner. The command
        runs in this process (click's runner on ql3's own command group, the environment
        as ``env`` leaves it): the same code as the binary without a Python start per
        token; the binary itself is tested where the command is the subject."""
        from click.testing import CliRunner

        from qinglong.local.app.cli import main

        args = ["control", "token", "create", "--database-url", self.db.owner_url,
                "--name", name or f"{scope}-{secrets.token_hex(3)}", "--scope", scope,
                "--json"]
        if pool is not None:
            args += ["--pool", pool]
        if labels is not None:
            args += ["--pool-labels", labels]
        unset: dict[str, str | None] = {k: None for k in os.environ
                                        if k.startswith(("QL3_", "AWS_"))}
        out = CliRunner().invoke(main, args, env={**unset, **CREDS}, catch_exceptions=False)
        if out.exit_code != 0:
            raise AssertionError(f"ql3 {args[:3]} exited {out.exit_code}: {out.stderr}")
        token: str = json.loads(out.stdout)["token"]
        return token

    def _start(self, name: str, args: list[str], env: dict[str, str],
               command: Sequence[str] = (QL3,)) -> Proc:
        log_path = self.tmp / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen([*command, *args], env=env, stdout=log, stderr=log,
                                     start_new_session=True)
        proc = Proc(name, popen, log_path)
        self.procs.append(proc)
        return proc

    def start_control(self, name: str, *extra: str, lease_ms: int = 3000,
                      heartbeat_ms: int = 1000, wait: bool = True, port: int | None = None,
                      command: Sequence[str] = (QL3,)) -> Proc:
        """``ql3 control serve`` (``command`` instead of ``ql3``, e.g. another release) on
        loopback ``port`` (a free one unless given: a replacement takes its predecessor's);
        waits for ``/readyz`` ready unless ``wait`` is False."""
        port = port or free_port()
        proc = self._start(name, [
            "control", "serve", "--database-url", self.db.runtime_url,
            "--runtime-role", self.db.runtime_role, "--listen", f"127.0.0.1:{port}",
            "--log-bucket", self.bucket, "--s3-endpoint", self.s3_endpoint,
            "--replica-id", name, "--lease-ms", str(lease_ms),
            "--heartbeat-ms", str(heartbeat_ms), *extra], self.env(), command)
        proc.url = f"http://127.0.0.1:{port}"
        if wait:
            self.wait_ready(proc)
        return proc

    def start_controls(self, names: Sequence[str], **options: Any) -> list[Proc]:
        """``start_control(name, **options)`` for each of ``names``, all started before any
        is waited for (their start-ups overlap); each ready on return."""
        procs = [self.start_control(name, **{**options, "wait": False}) for name in names]
        for proc in procs:
            self.wait_ready(proc)
        return procs

    def wait_ready(self, proc: Proc, timeout: float = 30) -> None:
        """Wait until control ``proc`` answers ``/readyz`` 200; AssertionError with its log
        if it exits or is not ready within ``timeout`` s."""
        ready = wait_for(lambda: not proc.alive() or _ready(proc.url or ""), timeout, 0.1)
        if not proc.alive() or not ready:
            raise AssertionError(f"control {proc.name} did not become ready: {proc.log()}")

    def start_worker(self, name: str, token: str, control_url: str, *extra: str,
                     concurrency: int = 2, labels: str | None = None,
                     isolation: str = "none", command: Sequence[str] = (QL3,)) -> Proc:
        """``ql3 worker run`` (``command`` instead of ``ql3``, e.g. another build) with its
        token in ``QL3_WORKER_TOKEN``. ``isolation`` "none" (these tests' tasks write into
        pytest's private tmp, which an attempt uid could not; with --allow-shared-uid), else
        that mode with an attempt root of its own."""
        args = ["worker", "run", "--control-url", control_url, "--name", name,
                "--concurrency", str(concurrency), "--spool-dir", str(self.tmp / f"spool-{name}"),
                "--isolation", isolation]
        if isolation == "none":
            args.append("--allow-shared-uid")
        else:
            args += ["--attempt-root", str(self.attempt_root(name))]
        if labels is not None:
            args += ["--labels", labels]
        env = {k: v for k, v in self.env(QL3_WORKER_TOKEN=token).items()
               if not k.startswith("AWS_")}  # a worker holds no bucket credentials
        proc = self._start(name, [*args, *extra], env, command)
        proc.worker = True
        return proc

    def api(self, url: str, token: str) -> httpx.Client:
        return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                            timeout=10)

    def attempt_root(self, name: str) -> Path:
        """Worker ``name``'s attempt root: below a directory of its own under /tmp that
        every attempt uid can pass through (pytest's own tmp is private to root)."""
        if not hasattr(self, "_attempts_base"):
            self._attempts_base = Path(tempfile.mkdtemp(prefix="ql3-kit-", dir="/tmp"))
            os.chmod(self._attempts_base, 0o711)
        return self._attempts_base / f"attempts-{name}"

    def close(self) -> None:
        """Stop every process started here: SIGTERM to all the workers at once (each drains
        to replicas that are still up), then to all the other processes at once; SIGKILL
        to any still running 15 s after its SIGTERM."""
        _terminate_together([p for p in self.procs if p.worker])
        _terminate_together([p for p in self.procs if not p.worker])
        if hasattr(self, "_attempts_base"):
            shutil.rmtree(self._attempts_base, ignore_errors=True)


def _terminate_together(procs: list[Proc], timeout: float = 15) -> None:
    """``Proc.terminate`` of each of ``procs``, the SIGTERMs sent together rather than one
    after the other's exit."""
    alive = [p for p in procs if p.alive()]
    for proc in alive:
        proc.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in alive:
        try:
            proc.popen.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait(10)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def cluster_world(tmp: Path, s3_endpoint: str, db: ClusterDb, *,
                  reaper: Reaper | None) -> Iterator[Cluster]:
    """A ``Cluster`` in ``tmp`` on database ``db`` (``ClusterDb.create``) and a fresh
    versioned bucket on ``s3_endpoint`` (integration/s3's ``new_bucket``). On exit its
    processes are stopped and ``db`` and its roles handed to ``reaper`` (None: left to
    whoever removes the server)."""
    from s3_services import CREDS as S3_CREDS
    from s3_services import new_bucket

    from qinglong.control.retention.objects import make_client

    try:
        bucket = new_bucket(make_client(s3_endpoint, timeout_s=5, **S3_CREDS), versioned=True)
        cluster = Cluster(tmp, db, s3_endpoint, bucket)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        if reaper is not None:
            reaper.drop(pg_url("postgres", "postgres", db.server), db.name, db.login_role,
                        db.runtime_role)
