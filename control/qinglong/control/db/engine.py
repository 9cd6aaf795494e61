"""The one way to reach PostgreSQL in ``control``: a SQLAlchemy Core engine over psycopg 3
(docs/protocols.md §4.5).

The URL is handed to libpq unchanged (``creator``), so everything libpq accepts works:
``postgresql://…`` URLs, ``key=value`` conninfo, several hosts with
``target_session_attrs=read-write`` for a failover pair. Every connection runs with the
session time zone UTC (timestamps load as aware UTC datetimes) and READ COMMITTED (the claim
protocols' isolation level).

No ping per checkout: the pool begins the transaction as it hands a connection out (the
``BEGIN`` psycopg would send before the first statement anyway, so no extra round trip). When
that ``BEGIN`` fails because the connection is broken (a restart, a failover, a backend ended
by ``pg_terminate_backend``), nothing of the caller's transaction was sent: the pool drops
its older connections and hands out a fresh one (``begin_on_checkout``). A connection lost
after that — during or after the transaction's first statement — raises the driver's
OperationalError to the caller (the API answers 503 ``database_unavailable``), never a
silent retry. A caller that sets another isolation level through ``execution_options`` gets
a connection whose transaction has not begun yet (``_isolation_change``).

Protocol statements are named SQL (``db/queries.py``) written with psycopg's
``%(name)s`` placeholders and run at the driver level through the same pool: ``run_named``.
The API's dynamic filters are Core ``select`` over ``db/tables.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sqlalchemy import Connection, CursorResult, Engine


class Transactions(Protocol):
    """Where a step opens its transaction: an ``Engine`` (a pooled connection, committed
    at the end of the block, rolled back on an exception) or ``InTransaction`` (the
    caller's transaction, already open)."""

    def begin(self) -> AbstractContextManager[Connection]: ...


class InTransaction:
    """A ``Transactions`` whose ``begin()`` hands out ``conn`` inside the transaction its
    owner already opened (nothing begun or committed here), so a request's token read and
    its step are one transaction (docs/protocols.md §4.5)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        yield self.conn

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

    engine = sqlalchemy.create_engine(
        "postgresql+psycopg://", creator=creator, pool_pre_ping=False,
        pool_size=pool_size, max_overflow=max_overflow, pool_timeout=10,
        isolation_level="READ COMMITTED",
        hide_parameters=True,  # an error's text never carries a statement's values
    )
    sqlalchemy.event.listen(engine, "checkout", begin_on_checkout)
    sqlalchemy.event.listen(engine, "set_connection_execution_options", _isolation_change)
    return engine


def begin_on_checkout(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """Pool ``checkout`` hook: send the transaction's ``BEGIN`` (at the connection's
    isolation level) now. A broken connection raises SQLAlchemy's InvalidatePoolError, on
    which the pool discards every connection older than now and checks out a fresh one (at
    most twice); nothing of the caller's was sent yet, so that retry cannot repeat a write.
    Any other failure of the ``BEGIN`` is raised as psycopg's error."""
    import psycopg
    from psycopg import pq
    from sqlalchemy.exc import InvalidatePoolError

    pgconn = dbapi_connection.pgconn
    if dbapi_connection.autocommit or pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return
    level = dbapi_connection.isolation_level
    command = b"BEGIN" if level is None else \
        b"BEGIN ISOLATION LEVEL " + level.name.replace("_", " ").encode("ascii")
    try:
        result = pgconn.exec_(command)
    except psycopg.OperationalError as exc:  # the socket could not even be written
        raise InvalidatePoolError(f"BEGIN failed: {type(exc).__name__}") from None
    if result.status == pq.ExecStatus.COMMAND_OK:
        return
    if pgconn.status != pq.ConnStatus.OK:
        raise InvalidatePoolError("BEGIN failed: the connection is broken")
    raise psycopg.OperationalError("BEGIN failed on checkout")


def _isolation_change(conn: Connection, options: Mapping[str, Any]) -> None:
    """Before ``conn.execution_options(isolation_level=…)`` is applied: end the empty
    transaction ``begin_on_checkout`` opened (psycopg refuses to change the level inside
    one); the driver begins the next at the new level with the first statement."""
    if "isolation_level" not in options or conn.in_transaction():
        return
    dbapi = conn.connection.dbapi_connection
    if dbapi is not None and not dbapi.autocommit:
        dbapi.rollback()


def run_named(conn: Connection, statement: str, params: Mapping[str, Any] | None = None
              ) -> CursorResult[*tuple[Any, ...]]:
    """Run one named protocol statement (``%(name)s`` placeholders, psycopg's style) on
    ``conn`` inside its current transaction; returns the cursor result (``.mappings()``,
    ``.rowcount``, ``.scalar()``)."""
    return conn.exec_driver_sql(statement, dict(params or {}))
