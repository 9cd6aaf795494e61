"""Shared setup of the cluster benches (bench/claims.py, bench/retention.py).

Reuses the integration fixtures' helpers by path (``integration/control/pg_control_db.py``,
``integration/s3/fault_proxy.py``) without modifying them. Everything talks to 127.0.0.1 only:
PostgreSQL 15 at 127.0.0.1:5432 (trust, user ``postgres``), moto and the fault proxy on free
loopback ports. Every database, role and process a bench creates is dropped or stopped by the
context managers here.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "integration" / "control"))

from pg_control_db import admin, db_url, drop_database, drop_role, unique  # noqa: E402

FAULT_PROXY = ROOT / "integration" / "s3" / "fault_proxy.py"
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def role_url(name: str, role: str) -> str:
    """URL of database ``name`` as ``postgres`` acting as ``role`` (``-c role=...``)."""
    return db_url(name) + "?options=" + urllib.parse.quote(f"-c role={role}")


@contextmanager
def migrated_database(prefix: str) -> Iterator[tuple[str, str]]:
    """``(database, runtime_role)``: a fresh migrated database with its own runtime role,
    both dropped on exit (also when the bench fails)."""
    import psycopg

    from qinglong.control.db.migrations import migrate

    name, role = unique(prefix), unique(prefix + "rt")
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        with psycopg.connect(db_url(name), autocommit=True) as conn:
            migrate(conn, runtime_role=role)
        yield name, role
    finally:
        drop_database(name)
        drop_role(role)


@contextmanager
def cloned_database(template: str) -> Iterator[str]:
    """A copy of ``template`` (nobody may be connected to it), dropped on exit."""
    name = unique("ql3bench_run")
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield name
    finally:
        drop_database(name)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {deadline_s}s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextmanager
def moto_server() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a ``python -m moto.server`` process, stopped on exit."""
    port = free_port()
    env = dict(os.environ, PYTHONWARNINGS="ignore", **{k.upper(): v for k, v in CREDS.items()})
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        _wait_port(port, proc, 20)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@contextmanager
def fault_proxy(upstream: str, **faults: object) -> Iterator[str]:
    """Endpoint of ``integration/s3/fault_proxy.py`` in front of ``upstream`` with ``faults``
    (e.g. ``latency_ms=20``); the process is stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="ql3bench-proxy-") as tmp:
        config, port_file = Path(tmp) / "config.json", Path(tmp) / "port"
        config.write_text(json.dumps(faults))
        proc = subprocess.Popen(
            [sys.executable, str(FAULT_PROXY), "--upstream", upstream.removeprefix("http://"),
             "--config", str(config), "--log", str(Path(tmp) / "deletes.jsonl"),
             "--port-file", str(port_file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not port_file.exists() or not port_file.read_text().strip():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("fault proxy did not start")
                time.sleep(0.02)
            yield f"http://127.0.0.1:{int(port_file.read_text())}"
        finally:
            stop(proc)
