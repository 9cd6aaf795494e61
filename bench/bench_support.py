"""Shared setup of the cluster benches (bench/claims.py, bench/retention.py).

Reuses the integration fixtures' helpers by path (``integration/control/pg_control_db.py``,
``integration/s3/fault_proxy.py``) without modifying them. Everything talks to 127.0.0.1 only:
PostgreSQL 15 at 127.0.0.1:5432 (trust, user ``postgres``), moto and the fault proxy on free
loopback ports. Every database, role and process a bench creates is dropped or stopped by the
context managers here.
"""

from __future__ import annotations

import sys
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "integration" / "control"))
sys.path.insert(0, str(ROOT / "integration" / "s3"))

from pg_control_db import admin, db_url, drop_database, drop_role, unique  # noqa: E402
from s3_services import CREDS, FaultProxy, moto_server  # noqa: E402

__all__ = ["CREDS", "moto_server"]  # re-exported for bench/retention.py


def role_url(name: str, role: str) -> str:
    """URL of database ``name`` as ``postgres`` acting as ``role`` (``-c role=...``)."""
    return db_url(name) + "?options=" + urllib.parse.quote(f"-c role={role}")


@contextmanager
def migrated_database(prefix: str) -> Iterator[tuple[str, str]]:
    """``(database, runtime_role)``: a fresh migrated database with its own runtime role,
    both dropped on exit (also when the bench fails)."""
    from qinglong.control.db.engine import create_engine
    from qinglong.control.db.migrations import migrate

    name, role = unique(prefix), unique(prefix + "rt")
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        engine = create_engine(db_url(name), pool_size=1, max_overflow=0)
        try:
            with engine.connect() as conn:
                migrate(conn, runtime_role=role)
        finally:
            engine.dispose()  # a template: nobody may stay connected
        yield name, role
    finally:
        drop_database(name)
        drop_role(role)


@contextmanager
def cloned_database(template: str) -> Iterator[str]:
    """A copy of ``template`` (nobody may be connected to it) after a checkpoint, dropped on
    exit."""
    name = unique("ql3bench_run")
    with admin() as conn:
        # FILE_COPY: the copy is not written to WAL (WAL_LOG, PG 15's default, writes the
        # whole template there and the checkpoints it triggers land inside the next timed
        # run); the CHECKPOINT leaves every run the same clean start.
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY = FILE_COPY')
        conn.execute("CHECKPOINT")
    try:
        yield name
    finally:
        drop_database(name)


@contextmanager
def fault_proxy(upstream: str, **faults: object) -> Iterator[str]:
    """Endpoint of ``integration/s3/fault_proxy.py`` in front of ``upstream`` with ``faults``
    (e.g. ``latency_ms=20``); the process is stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="ql3bench-proxy-") as tmp:
        proxy = FaultProxy(Path(tmp), upstream)
        try:
            proxy.set(**faults)
            yield proxy.endpoint
        finally:
            proxy.stop()
