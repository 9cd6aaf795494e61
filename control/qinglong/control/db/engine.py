"""The one way to reach PostgreSQL in ``control``: a SQLAlchemy Core engine over psycopg 3
(docs/protocols.md §4.5).

The URL is handed to libpq unchanged (``creator``), so everything libpq accepts works:
``postgresql://…`` URLs, ``key=value`` conninfo, several hosts with
``target_session_attrs=read-write`` for a failover pair. Every connection runs with the
session time zone UTC (timestamps load as aware UTC datetimes) and READ COMMITTED (the claim
protocols' isolation level); the pool pings a connection before handing it out
(``pool_pre_ping``), so a connection broken by a restart or failover is replaced instead of
failing the next statement.

Protocol statements are named SQL (``db/queries.py``) written with psycopg's
``%(name)s`` placeholders and run at the driver level through the same pool: ``run_named``.
The API's dynamic filters are Core ``select`` over ``db/tables.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Connection, CursorResult, Engine

DEFAULT_CONNECT_TIMEOUT_S = 10
DEFAULT_POOL_SIZE = 5
DEFAULT_MAX_OVERFLOW = 5


def _connect_kwargs(url: str) -> dict[str, Any]:
    """``{"connect_timeout": 10}`` (seconds) unless ``url`` or ``PGCONNECT_TIMEOUT`` sets a
    non-empty one, which libpq then reads."""
    import os

    from psycopg.conninfo import conninfo_to_dict

    own = conninfo_to_dict(url).get("connect_timeout") or os.environ.get("PGCONNECT_TIMEOUT")
    if own is not None and str(own).strip():
        return {}
    return {"connect_timeout": DEFAULT_CONNECT_TIMEOUT_S}


def create_engine(
    url: str,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    max_overflow: int = DEFAULT_MAX_OVERFLOW,
    lock_timeout_ms: int | None = None,
    statement_timeout_ms: int | None = None,
    application_name: str = "ql3-control",
) -> Engine:
    """A pooled engine for ``url`` (any libpq URL or conninfo; not logged, never echoed).

    ``lock_timeout_ms`` / ``statement_timeout_ms``: when set, every pooled connection gives up
    a lock wait / a statement after that many milliseconds (LockNotAvailable /
    QueryCanceled), so a lifecycle blocked by a table lock returns to its loop and to a
    pending stop. Dispose with ``engine.dispose()``. Raises nothing until first use.
    """
    import psycopg
    import sqlalchemy
    from psycopg.conninfo import conninfo_to_dict

    kwargs = _connect_kwargs(url)
    own_options = conninfo_to_dict(url).get("options")  # kept: e.g. "-c role=ql3_runtime"
    options = [str(own_options)] if own_options else []
    options.append("-c TimeZone=UTC")
    if lock_timeout_ms is not None:
        options.append(f"-c lock_timeout={int(lock_timeout_ms)}")
    if statement_timeout_ms is not None:
        options.append(f"-c statement_timeout={int(statement_timeout_ms)}")

    def creator() -> psycopg.Connection[Any]:
        return psycopg.connect(url, options=" ".join(options),
                               application_name=application_name, **kwargs)

    return sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=creator, pool_pre_ping=True,
        pool_size=pool_size, max_overflow=max_overflow, pool_timeout=10,
        isolation_level="READ COMMITTED",
        hide_parameters=True,  # an error's text never carries a statement's values
    )


def run_named(conn: Connection, statement: str, params: Mapping[str, Any] | None = None
              ) -> CursorResult[*tuple[Any, ...]]:
    """Run one named protocol statement (``%(name)s`` placeholders, psycopg's style) on
    ``conn`` inside its current transaction; returns the cursor result (``.mappings()``,
    ``.rowcount``, ``.scalar()``)."""
    return conn.exec_driver_sql(statement, dict(params or {}))
