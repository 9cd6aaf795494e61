"""Connections for the control plane: psycopg 3 with psycopg_pool (DESIGN.md §4.1).

Every pooled connection is autocommit with READ COMMITTED, so each protocol step opens its
own short transaction (``conn.transaction()``, or ``db/prepared.py`` for the sweeper's
statements) and nothing stays open between steps (ADR-0379 §3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool


def configure(conn: psycopg.Connection[Any]) -> None:
    """Autocommit plus READ COMMITTED (the claim protocol's isolation level), no psycopg
    auto-prepare, and the session time zone UTC: timestamps load with
    ``datetime.timezone.utc``, which the evidence documents format without a zone lookup
    (all columns are ``timestamptz``, so no value changes)."""
    from psycopg import IsolationLevel

    conn.autocommit = True
    conn.isolation_level = IsolationLevel.READ_COMMITTED
    # psycopg's own auto-prepare is off: after a rollback it would send DEALLOCATE ALL,
    # which also drops the statements db/prepared.py keeps on this connection
    conn.prepare_threshold = None
    conn.execute("SET TIME ZONE 'UTC'")


DEFAULT_CONNECT_TIMEOUT_S = 10


def timeout_kwargs(url: str) -> dict[str, Any]:
    """``{"connect_timeout": 10}`` (seconds) unless ``url`` or ``PGCONNECT_TIMEOUT`` sets a
    non-empty one, which psycopg then reads; an empty one in the URL means the default."""
    import os

    from psycopg.conninfo import conninfo_to_dict

    own = conninfo_to_dict(url).get("connect_timeout") or os.environ.get("PGCONNECT_TIMEOUT")
    if own is not None and str(own).strip():
        return {}
    return {"connect_timeout": DEFAULT_CONNECT_TIMEOUT_S}


def connect(url: str) -> psycopg.Connection[Any]:
    """One configured connection (CLI commands, migrations); ``connect_timeout`` 10 s unless
    the URL sets one."""
    import psycopg

    conn = psycopg.connect(url, autocommit=True, **timeout_kwargs(url))
    configure(conn)
    return conn


def open_pool(url: str, *, min_size: int = 1, max_size: int = 4,
              lock_timeout_ms: int | None = None) -> ConnectionPool:
    """An opened pool of configured connections; close it with ``pool.close()``.

    ``lock_timeout_ms``: when set, every pooled connection gives up a lock wait after that
    many milliseconds (the statement fails with LockNotAvailable), so a sweeper blocked by a
    table lock gets back to its loop, and to a pending stop, instead of waiting forever."""
    from psycopg_pool import ConnectionPool

    def setup(conn: psycopg.Connection[Any]) -> None:
        configure(conn)
        if lock_timeout_ms is not None:
            conn.execute(f"SET lock_timeout = {int(lock_timeout_ms)}")

    pool: ConnectionPool = ConnectionPool(
        url, min_size=min_size, max_size=max_size, configure=setup, open=True,
        kwargs=timeout_kwargs(url),
    )
    return pool
