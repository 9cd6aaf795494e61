"""Named statements prepared once per connection and run over psycopg's libpq binding.

The sweeper's statements (claim; per row lock, retire, record failure: DESIGN.md §4.3) run
thousands of times per second on hosts whose CPU the database shares. A psycopg cursor costs
about 25 µs of Python per round trip; ``psycopg.pq`` costs about 5 µs (bench/claims.py shows
what that buys against pgbench running the same statements). Everything else stays psycopg's:
parameters are dumped and binary results loaded by its adapters (``psycopg.adapt.Transformer``),
and a failed statement raises the psycopg exception its SQLSTATE maps to
(``psycopg.errors.error_from_result``), so callers catch exactly what a cursor would raise.

A connection used here must be autocommit and must not be shared between threads while a
call runs (a pooled connection is held by one caller). ``transaction`` opens a READ COMMITTED
transaction (ADR-0379 §2: short transactions at that level) and ends it before returning.
"""

from __future__ import annotations

import re
import select
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.adapt import PyFormat, Transformer
from psycopg.errors import error_from_result
from psycopg.pq import ConnStatus, DiagnosticField, ExecStatus, Format, TransactionStatus

if TYPE_CHECKING:
    from psycopg.abc import Transformer as Adapter
    from psycopg.pq.abc import PGconn, PGresult

T = TypeVar("T")

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_INVALID_STATEMENT_NAME = "26000"  # SQLSTATE: the server no longer knows our prepared name


def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """``sql`` with ``%(name)s`` turned into ``$1, $2, …`` (a repeated name keeps its number)
    and the names in parameter order. ValueError on any other ``%`` (no literal percent
    signs: psycopg's ``%%`` escape has no meaning once the statement is server-side)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    converted = _PLACEHOLDER.sub(number, sql)
    if "%" in converted:
        raise ValueError("statement holds a '%' that is not a %(name)s placeholder")
    return converted, tuple(names)


_OK = (ExecStatus.TUPLES_OK, ExecStatus.COMMAND_OK)
_COMMAND_OK = (ExecStatus.COMMAND_OK,)
_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)
_BEGIN = b"BEGIN ISOLATION LEVEL READ COMMITTED"


@dataclass(slots=True)
class _Prepared:
    """One statement: its server-side name, text, parameter names and their formats."""

    server_name: bytes
    sql: bytes
    params: tuple[str, ...]
    formats: list[PyFormat]


@dataclass(slots=True)
class _ConnectionState:
    """What one connection has prepared, and its adapter (built once per connection)."""

    transformer: Adapter
    prepared: set[str] = field(default_factory=set)
    poller: select.poll = field(default_factory=select.poll)  # waits of pipelined calls


class Statements:
    """The named statements of one ``.sql`` file, each prepared on first use per connection.

    ``queries``: ``{name: SQL with %(param)s placeholders}``; ``prefix`` names them on the
    server (``prefix + name``), apart from psycopg's own ``_pg3_*`` statements. ValueError
    when a statement holds a literal ``%``.
    """

    def __init__(self, queries: Mapping[str, str], *, prefix: str) -> None:
        self._statements: dict[str, _Prepared] = {}
        for name, sql in queries.items():
            text, params = positional(sql)
            self._statements[name] = _Prepared((prefix + name).encode("ascii"),
                                               text.encode("utf-8"), params,
                                               [PyFormat.TEXT] * len(params))
        self._states: weakref.WeakKeyDictionary[psycopg.Connection[Any], _ConnectionState] = (
            weakref.WeakKeyDictionary())
        # the last connection used, checked first (a sweep runs many statements on one)
        self._last: tuple[weakref.ref[psycopg.Connection[Any]], _ConnectionState] | None = None

    def _state(self, conn: psycopg.Connection[Any]) -> _ConnectionState:
        last = self._last
        if last is not None and last[0]() is conn:
            return last[1]
        state = self._states.get(conn)
        if state is None:
            state = self._states[conn] = _ConnectionState(Transformer(conn))
        self._last = (weakref.ref(conn), state)
        return state

    def _ready(self, conn: psycopg.Connection[Any],
               name: str) -> tuple[_Prepared, _ConnectionState]:
        """Statement ``name``, prepared on ``conn`` (KeyError: unknown name)."""
        stmt = self._statements[name]
        state = self._state(conn)
        if name not in state.prepared:
            _check(conn, conn.pgconn.prepare(stmt.server_name, stmt.sql), _COMMAND_OK)
            state.prepared.add(name)
        return stmt, state

    def _failed(self, conn: psycopg.Connection[Any], name: str, result: PGresult,
                ok: tuple[ExecStatus, ...]) -> None:
        """Raise the error of ``result`` unless its status is in ``ok``."""
        if result.status not in ok:
            if _sqlstate(result) == _INVALID_STATEMENT_NAME:
                self._state(conn).prepared.discard(name)  # DEALLOCATE or DISCARD ran
            _check(conn, result, ok)

    def execute(self, conn: psycopg.Connection[Any], name: str,
                params: Mapping[str, Any]) -> Result:
        """Run statement ``name`` with ``params`` (every placeholder, by name); results in
        binary. Raises KeyError for an unknown name or a missing parameter, and the psycopg
        error of a failed statement (the connection's transaction, if any, is then aborted)."""
        stmt, state = self._ready(conn, name)
        tx = state.transformer
        values = tx.dump_sequence([params[n] for n in stmt.params], stmt.formats)
        pgconn = conn.pgconn
        result = pgconn.exec_prepared(stmt.server_name, values,  # type: ignore[arg-type]
                                      result_format=Format.BINARY)  # (stub omits NULL)
        if (result.status == ExecStatus.FATAL_ERROR
                and pgconn.transaction_status == TransactionStatus.IDLE
                and _sqlstate(result) == _INVALID_STATEMENT_NAME):
            # outside a transaction the failed call changed nothing: prepare again, retry once
            state.prepared.discard(name)
            stmt, state = self._ready(conn, name)
            result = pgconn.exec_prepared(stmt.server_name, values,  # type: ignore[arg-type]
                                          result_format=Format.BINARY)
        self._failed(conn, name, result, _OK)
        return Result(result, tx)

    def execute_and_commit(self, conn: psycopg.Connection[Any], name: str,
                           params: Mapping[str, Any]) -> Result:
        """Run statement ``name`` and COMMIT the open transaction in one round trip (libpq
        pipeline mode: both messages, then one Sync). Raises like ``execute``; when the
        statement fails, COMMIT is skipped and the transaction stays aborted (the caller's
        ``Transaction`` rolls it back). psycopg.ProgrammingError when no transaction is open.
        """
        pgconn = conn.pgconn
        if pgconn.transaction_status != TransactionStatus.INTRANS:
            raise psycopg.ProgrammingError("execute_and_commit needs an open transaction")
        stmt, state = self._ready(conn, name)  # prepared before the pipeline starts
        tx = state.transformer
        values = tx.dump_sequence([params[n] for n in stmt.params], stmt.formats)
        pgconn.enter_pipeline_mode()
        try:
            pgconn.send_query_prepared(stmt.server_name, values, result_format=Format.BINARY)
            pgconn.send_query_params(b"COMMIT", None)
            pgconn.pipeline_sync()
            result, commit = _pipeline_results(pgconn, state.poller)
        except BaseException:
            # interrupted with results unread (or the link broke): the session's state is
            # unknown, so the connection is closed (a pool discards it; the server rolls
            # back whatever the COMMIT did not reach)
            conn.close()
            raise
        pgconn.exit_pipeline_mode()
        self._failed(conn, name, result, _OK)
        _check(conn, commit, _COMMAND_OK)
        return Result(result, tx)

    def transaction(self, conn: psycopg.Connection[Any]) -> Transaction:
        """A context manager: BEGIN a READ COMMITTED transaction on ``conn``; COMMIT when
        the block ends (unless ``execute_and_commit`` already did), ROLLBACK when it raises.
        psycopg.ProgrammingError when ``conn`` is not idle (a transaction is already open)."""
        return Transaction(conn)


class Transaction:
    """``with Transaction(conn):`` one short READ COMMITTED transaction (see Statements)."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        conn = self._conn
        if conn.pgconn.status != ConnStatus.OK:
            raise psycopg.OperationalError("the connection is closed")
        if conn.pgconn.transaction_status != TransactionStatus.IDLE:
            raise psycopg.ProgrammingError("the connection is not idle: a transaction is open")
        _check(conn, conn.pgconn.exec_(_BEGIN), _COMMAND_OK)

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        conn = self._conn
        pgconn = conn.pgconn
        status = pgconn.transaction_status
        if exc_type is not None:
            if pgconn.status == ConnStatus.OK and status in _OPEN:
                pgconn.exec_(b"ROLLBACK")
            return
        if pgconn.status != ConnStatus.OK:
            raise psycopg.OperationalError("the connection was lost before the transaction "
                                           "ended")
        if status == TransactionStatus.IDLE:  # execute_and_commit committed it
            return
        if status != TransactionStatus.INTRANS:  # aborted: never report a commit
            if pgconn.status == ConnStatus.OK:
                pgconn.exec_(b"ROLLBACK")
            raise psycopg.errors.InFailedSqlTransaction("the transaction was aborted")
        _check(conn, pgconn.exec_(b"COMMIT"), _COMMAND_OK)


def _wait(pgconn: PGconn, poller: select.poll, events: int) -> None:
    """Block until ``pgconn``'s socket is ready for ``events`` (the GIL is released)."""
    poller.register(pgconn.socket, events)  # registering again replaces the events
    poller.poll()


def _pipeline_results(pgconn: PGconn, poller: select.poll) -> tuple[PGresult, PGresult]:
    """Flush a two-statement pipeline and read it up to its Sync: the two results (a
    statement skipped after an earlier error reports PIPELINE_ABORTED)."""
    while pgconn.flush():  # 1: the socket buffer is full, wait until it drains
        _wait(pgconn, poller, select.POLLOUT)
    results: list[PGresult] = []
    while True:
        while pgconn.is_busy():
            _wait(pgconn, poller, select.POLLIN)
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:  # the end of one statement's results
            if pgconn.status != ConnStatus.OK:
                raise psycopg.OperationalError("the connection to the server was lost")
            continue
        if result.status == ExecStatus.PIPELINE_SYNC:
            break
        results.append(result)
    if len(results) != 2:
        raise psycopg.InterfaceError(f"pipeline returned {len(results)} results, expected 2")
    return results[0], results[1]


class Result:
    """One statement's result: ``rowcount`` (rows returned or affected) and its rows, loaded
    by psycopg's binary loaders and shaped by ``make_row`` (a callable over the values)."""

    __slots__ = ("_pgresult", "_transformer")

    def __init__(self, pgresult: PGresult, transformer: Adapter) -> None:
        self._pgresult, self._transformer = pgresult, transformer

    @property
    def rowcount(self) -> int:
        """Rows returned (SELECT, RETURNING) or affected (INSERT, UPDATE, DELETE)."""
        if self._pgresult.nfields:
            return self._pgresult.ntuples
        return self._pgresult.command_tuples or 0

    @property
    def column_names(self) -> tuple[str, ...]:
        """The result's column names, in order."""
        res = self._pgresult
        return tuple((res.fname(i) or b"").decode("utf-8") for i in range(res.nfields))

    def rows(self, make_row: Callable[[Sequence[Any]], T]) -> list[T]:
        """Every row, each as ``make_row(values)``."""
        tx = self._transformer
        tx.set_pgresult(self._pgresult)
        return tx.load_rows(0, self._pgresult.ntuples, make_row)

    def first(self, make_row: Callable[[Sequence[Any]], T]) -> T | None:
        """The first row as ``make_row(values)``, or None when there is none."""
        if not self._pgresult.ntuples:
            return None
        tx = self._transformer
        tx.set_pgresult(self._pgresult)
        return tx.load_row(0, make_row)


def _sqlstate(result: PGresult) -> str:
    state = result.error_field(DiagnosticField.SQLSTATE)
    return state.decode("ascii") if state else ""


def _check(conn: psycopg.Connection[Any], result: PGresult,
           ok: tuple[ExecStatus, ...]) -> None:
    """Raise the psycopg error of ``result`` unless its status is in ``ok``. A broken
    connection raises OperationalError, as a cursor would."""
    if result.status in ok:
        return
    if conn.pgconn.status != ConnStatus.OK:
        message = (result.error_message or b"").decode("utf-8", "replace").strip()
        raise psycopg.OperationalError(message or "the connection to the server was lost")
    raise error_from_result(result, encoding=conn.info.encoding)
