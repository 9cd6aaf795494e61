"""Named statements prepared once per connection and run over psycopg's libpq binding.

The sweeper's statements (claim; per row lock, retire, record failure: DESIGN.md §4.3) run
thousands of times per second on hosts whose CPU the database shares. Run through
``psycopg.pq`` they cost about 40 % less client CPU per call than a psycopg cursor
(measured: 24 → 15 µs per call), and a transaction's BEGIN travels with its first statement
and its last statement with the COMMIT (libpq pipeline mode), so finalize takes two round
trips. Everything else stays psycopg's: parameters are dumped and binary results loaded by
its adapters (``psycopg.adapt.Transformer``, one per connection, rebuilt when the client
encoding changes), and a failed statement raises the psycopg exception its SQLSTATE maps to
(``psycopg.errors.error_from_result``; ``OperationalError`` when the link broke without
one). Parameters go as text and take the type the server infers from the statement, so a
statement casts any parameter whose range matters (``%(n)s::bigint``).

Rules for callers: the connection is autocommit and held by one thread while a call runs (a
pooled connection is). ``transaction`` opens one short READ COMMITTED transaction (ADR-0379
§2); run its body through ``Statements.run_transaction`` so that a transaction which failed
only because the server forgot our statements (``DEALLOCATE ALL`` / ``DISCARD ALL``, which
psycopg itself sends after a rollback once it has auto-prepared anything) is run once more:
it changed nothing. Results are awaited in Python (``select.poll``, the GIL released), so a
signal handler runs while a statement waits; an exception raised meanwhile (Ctrl-C) closes
the connection, which aborts the statement and its transaction on the server, except when
the COMMIT was already sent with it (``execute_and_commit``): the server may then still
commit, and the caller cannot know, exactly as when a COMMIT's answer is lost (finalize's
fence makes either outcome safe).
"""

from __future__ import annotations

import re
import select
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import errors
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ConnStatus, DiagnosticField, ExecStatus, Format, TransactionStatus

if TYPE_CHECKING:
    from psycopg.abc import Transformer as Adapter
    from psycopg.pq.abc import PGconn, PGresult

T = TypeVar("T")

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_INVALID_STATEMENT_NAME = "26000"  # the server no longer knows our prepared name
_DUPLICATE_PREPARED = "42P05"  # the server knows a name we thought we had not prepared
_OK = (ExecStatus.TUPLES_OK, ExecStatus.COMMAND_OK)
_COMMAND_OK = (ExecStatus.COMMAND_OK,)
_OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)
_BEGIN = b"BEGIN ISOLATION LEVEL READ COMMITTED"
_BEGIN_KEY, _COMMIT_KEY = "<begin>", "<commit>"


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


@dataclass(slots=True)
class _Prepared:
    """One statement: its server-side name, text, parameter names and their formats."""

    server_name: bytes
    sql: bytes
    params: tuple[str, ...]
    formats: list[PyFormat]


@dataclass(slots=True)
class _ConnectionState:
    """What one connection has prepared, its adapter (rebuilt when the client encoding
    changes) and the poll object its waits use. Kept as an attribute of the connection, so
    it lives and dies with it."""

    adapter: Adapter
    encoding: bytes | None
    prepared: set[str] = field(default_factory=set)
    poller: select.poll = field(default_factory=select.poll)


_STATE_ATTRIBUTE = "_ql3_prepared_statements"  # on the psycopg Connection: {Statements: state}


class Statements:
    """The named statements of one ``.sql`` file, prepared per connection on first use.

    ``queries``: ``{name: SQL with %(param)s placeholders}``; ``prefix`` names them on the
    server (``prefix + name``). ValueError when a statement holds a literal ``%``.
    """

    def __init__(self, queries: Mapping[str, str], *, prefix: str) -> None:
        self._statements: dict[str, _Prepared] = {}
        for name, sql in queries.items():
            text, params = positional(sql)
            self._statements[name] = _Prepared((prefix + name).encode("ascii"),
                                               text.encode("utf-8"), params,
                                               [PyFormat.TEXT] * len(params))
        # the transaction's own commands, prepared too (as pgbench -M prepared does): no
        # parse per transaction on the server. Keys no .sql block name can take.
        self._begin = self._statements[_BEGIN_KEY] = _Prepared(
            (prefix + "_begin").encode("ascii"), _BEGIN, (), [])
        self._commit = self._statements[_COMMIT_KEY] = _Prepared(
            (prefix + "_commit").encode("ascii"), b"COMMIT", (), [])

    def _state(self, conn: psycopg.Connection[Any]) -> _ConnectionState:
        """This file's state on ``conn``, created on first use."""
        states: dict[Statements, _ConnectionState] | None = getattr(conn, _STATE_ATTRIBUTE,
                                                                     None)
        if states is None:
            states = {}
            setattr(conn, _STATE_ATTRIBUTE, states)
        state = states.get(self)
        encoding = conn.pgconn.parameter_status(b"client_encoding")
        if state is None:
            state = states[self] = _ConnectionState(Transformer(conn), encoding)
        elif state.encoding != encoding:  # SET client_encoding ran: adapt with the new one
            state.adapter, state.encoding = Transformer(conn), encoding
        return state

    def prepare_all(self, conn: psycopg.Connection[Any]) -> _ConnectionState:
        """Prepare every statement ``conn`` lacks and return the connection's state. Call it
        while no transaction is open (a ``Transaction`` does, before BEGIN): a name the
        server already holds is deallocated and prepared again, so the server runs exactly
        this file's text."""
        state = self._state(conn)
        if len(state.prepared) == len(self._statements):
            return state
        pgconn = conn.pgconn
        for name, stmt in self._statements.items():
            if name in state.prepared:
                continue
            result = pgconn.prepare(stmt.server_name, stmt.sql)
            if result.status not in _COMMAND_OK and _sqlstate(result) == _DUPLICATE_PREPARED:
                # e.g. a signal arrived between the server's answer and our bookkeeping
                _check(conn, pgconn.exec_(b"DEALLOCATE " + stmt.server_name), _COMMAND_OK)
                result = pgconn.prepare(stmt.server_name, stmt.sql)
            _check(conn, result, _COMMAND_OK)
            state.prepared.add(name)
        return state

    def _call(self, conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any]
              ) -> tuple[_Prepared, _ConnectionState, Adapter, Sequence[Any]]:
        """The prepared statement, the connection's state (read per call: the client
        encoding may have changed), its adapter and the dumped parameters. KeyError for an
        unknown statement or a missing parameter."""
        stmt = self._statements[name]
        state = self._state(conn)
        if name not in state.prepared:
            self.prepare_all(conn)  # a wiped session: only reachable outside a transaction
        adapter = state.adapter
        values = adapter.dump_sequence([params[n] for n in stmt.params], stmt.formats)
        return stmt, state, adapter, values

    def _raise(self, conn: psycopg.Connection[Any], result: PGresult) -> None:
        """Raise ``result``'s error; on 26000 forget every name (DEALLOCATE ALL ran)."""
        if _sqlstate(result) == _INVALID_STATEMENT_NAME:
            self._state(conn).prepared.clear()
        _check(conn, result, _OK)

    def execute(self, conn: psycopg.Connection[Any], name: str,
                params: Mapping[str, Any]) -> Result:
        """Run statement ``name`` with ``params`` (every placeholder, by name); results in
        binary. Raises KeyError for an unknown name or a missing parameter, and the psycopg
        error of a failed statement (an open transaction is then aborted). Outside a
        transaction a statement the server forgot is prepared again and run once more."""
        stmt, state, adapter, values = self._call(conn, name, params)
        pgconn = conn.pgconn

        def send() -> None:
            pgconn.send_query_prepared(stmt.server_name, values, result_format=Format.BINARY)

        result = _exchange(conn, state.poller, send)
        if result.status not in _OK:
            if (_sqlstate(result) == _INVALID_STATEMENT_NAME
                    and pgconn.transaction_status == TransactionStatus.IDLE):
                state.prepared.clear()  # the failed call changed nothing: prepare, retry
                self.prepare_all(conn)
                result = _exchange(conn, state.poller, send)
            if result.status not in _OK:
                self._raise(conn, result)
        return Result(result, adapter)

    def _command(self, conn: psycopg.Connection[Any], command: bytes) -> PGresult:
        """Run one parameterless command (COMMIT prepared, ROLLBACK) and return its result."""
        pgconn = conn.pgconn
        state = self._state(conn)
        if command == b"COMMIT" and _COMMIT_KEY in state.prepared:
            name = self._commit.server_name
            return _exchange(conn, state.poller,
                             lambda: pgconn.send_query_prepared(name, None))
        return _exchange(conn, state.poller, lambda: pgconn.send_query(command))

    def _pipelined(self, conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any],
                   *, begin: bool, commit: bool) -> Result:
        """Statement ``name`` preceded by BEGIN and/or followed by COMMIT, in one round trip
        (libpq pipeline mode: the messages, then one Sync). When the statement fails, the
        server skips the COMMIT and the transaction stays aborted for the caller's
        ``Transaction`` to roll back."""
        stmt, state, adapter, values = self._call(conn, name, params)
        pgconn = conn.pgconn
        pgconn.enter_pipeline_mode()
        try:
            if begin:
                pgconn.send_query_prepared(self._begin.server_name, None)
            pgconn.send_query_prepared(stmt.server_name, values, result_format=Format.BINARY)
            if commit:
                pgconn.send_query_prepared(self._commit.server_name, None)
            pgconn.pipeline_sync()
            results = _pipeline_results(conn, state.poller)
        except BaseException:
            # interrupted with results unread (or the link broke): the session's state is
            # unknown, so the connection is closed (a pool discards it; the server rolls
            # back whatever the COMMIT did not reach)
            conn.close()
            raise
        pgconn.exit_pipeline_mode()
        if len(results) != 1 + begin + commit:
            raise psycopg.InterfaceError(f"pipeline returned {len(results)} results")
        if begin and results[0].status not in _COMMAND_OK:
            self._raise(conn, results[0])  # e.g. our BEGIN was deallocated: nothing ran
        result = results[int(begin)]
        if result.status not in _OK:
            self._raise(conn, result)  # a COMMIT after it was skipped: still aborted
        if commit and results[-1].status not in _COMMAND_OK:
            self._raise(conn, results[-1])  # the transaction is aborted, not committed
        return Result(result, adapter)

    def transaction(self, conn: psycopg.Connection[Any]) -> Transaction:
        """A context manager yielding a ``Transaction``: BEGIN READ COMMITTED on ``conn``;
        COMMIT when the block ends (unless ``execute_and_commit`` did), ROLLBACK when it
        raises. psycopg.ProgrammingError when ``conn`` is not idle (a transaction is open)."""
        return Transaction(self, conn)

    def run_transaction(self, conn: psycopg.Connection[Any],
                        body: Callable[[Transaction], T]) -> T:
        """``body(tx)`` inside ``transaction(conn)``, run once more when it failed with
        InvalidSqlStatementName (the server forgot our statements; the aborted transaction
        changed nothing). Raises whatever ``body`` or the transaction raises."""
        try:
            with self.transaction(conn) as tx:
                return body(tx)
        except errors.InvalidSqlStatementName:
            if conn.closed:
                raise
        with self.transaction(conn) as tx:  # prepares everything again before BEGIN
            return body(tx)


class Transaction:
    """One short READ COMMITTED transaction of ``Statements`` on one connection.

    Its BEGIN travels with its first statement (one round trip); ``execute_and_commit``
    sends the last statement with the COMMIT, after which the transaction is over and
    ``execute`` refuses. A block that runs no statement sends nothing.
    """

    __slots__ = ("_begun", "_conn", "_done", "_entered", "_statements")

    def __init__(self, statements: Statements, conn: psycopg.Connection[Any]) -> None:
        self._statements, self._conn = statements, conn
        self._begun = self._done = self._entered = False

    def execute(self, name: str, params: Mapping[str, Any]) -> Result:
        """Run statement ``name`` in this transaction (``Statements.execute``'s errors).
        psycopg.ProgrammingError once ``execute_and_commit`` ended it."""
        self._check_usable()
        if self._begun:
            return self._statements.execute(self._conn, name, params)
        self._begun = True
        return self._statements._pipelined(self._conn, name, params, begin=True, commit=False)

    def execute_and_commit(self, name: str, params: Mapping[str, Any]) -> Result:
        """Run statement ``name`` and COMMIT in one round trip. Raises like ``execute``;
        when the statement fails the COMMIT is skipped and the block's exit rolls the
        transaction back."""
        self._check_usable()
        begin, self._begun, self._done = not self._begun, True, True
        return self._statements._pipelined(self._conn, name, params, begin=begin, commit=True)

    def _check_usable(self) -> None:
        """ProgrammingError (nothing sent, nothing marked) outside the ``with`` block or
        after ``execute_and_commit`` ended the transaction."""
        if not self._entered:
            raise psycopg.ProgrammingError("use the transaction as a context manager")
        if self._done:
            raise psycopg.ProgrammingError("the transaction was committed already")

    def __enter__(self) -> Transaction:
        conn = self._conn
        pgconn = conn.pgconn
        if pgconn.status != ConnStatus.OK:
            raise psycopg.OperationalError("the connection is closed")
        if pgconn.transaction_status != TransactionStatus.IDLE:
            raise psycopg.ProgrammingError("the connection is not idle: a transaction is open")
        self._statements.prepare_all(conn)  # never inside the transaction: see prepare_all
        self._entered = True
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self._done = True
        conn, run = self._conn, self._statements._command
        pgconn = conn.pgconn
        status = pgconn.transaction_status
        if exc_type is not None:
            if pgconn.status == ConnStatus.OK and status in _OPEN:
                run(conn, b"ROLLBACK")  # its own failure closes the connection
            return
        if pgconn.status != ConnStatus.OK:
            raise psycopg.OperationalError("the connection was lost before the transaction "
                                           "ended")
        if status == TransactionStatus.IDLE:  # committed by execute_and_commit, or empty
            return
        if status != TransactionStatus.INTRANS:  # aborted: never report a commit
            run(conn, b"ROLLBACK")
            raise errors.InFailedSqlTransaction("the transaction was aborted")
        result = run(conn, b"COMMIT")
        if result.status not in _COMMAND_OK:
            # e.g. our prepared COMMIT was deallocated: that error aborted the transaction,
            # so roll it back (a plain COMMIT now would roll back and report success)
            if pgconn.status == ConnStatus.OK and pgconn.transaction_status in _OPEN:
                run(conn, b"ROLLBACK")
            self._statements._raise(conn, result)


def _exchange(conn: psycopg.Connection[Any], poller: select.poll,
              send: Callable[[], None]) -> PGresult:
    """Send one statement with ``send`` and wait for its result without blocking in C, so a
    signal handler runs while the server works. An exception while waiting (KeyboardInterrupt
    from Ctrl-C, a broken link) closes the connection, which makes the server abort the
    statement and its transaction, and propagates."""
    result: PGresult | None = None
    try:
        send()
        _flush(conn.pgconn, poller)
        while (last := _next_result(conn, poller)) is not None:
            result = last
    except BaseException:
        conn.close()
        raise
    if result is None:
        raise psycopg.OperationalError("the connection to the server was lost")
    return result


def _flush(pgconn: PGconn, poller: select.poll) -> None:
    """Send what libpq has queued, waiting while the socket buffer is full."""
    while pgconn.flush():  # 1: more to send
        _wait(pgconn, poller, select.POLLOUT)


def _next_result(conn: psycopg.Connection[Any], poller: select.poll) -> PGresult | None:
    """The next result once it has arrived (None: the current statement's results ended)."""
    pgconn = conn.pgconn
    while pgconn.is_busy():
        _wait(pgconn, poller, select.POLLIN)
        _consume(conn)
    return pgconn.get_result()


def _consume(conn: psycopg.Connection[Any]) -> None:
    """Read what the server sent. When the link broke, raise the class of the server's last
    word if it left one (AdminShutdown for a terminated backend), else OperationalError."""
    pgconn = conn.pgconn
    try:
        pgconn.consume_input()
    except psycopg.OperationalError as exc:
        reason = pgconn.get_result()
        if reason is not None and _sqlstate(reason):
            raise errors.error_from_result(reason, encoding=conn.info.encoding) from exc
        raise


def _wait(pgconn: PGconn, poller: select.poll, events: int) -> None:
    """Block until ``pgconn``'s socket is ready for ``events`` (the GIL is released)."""
    poller.register(pgconn.socket, events)  # registering again replaces the events
    poller.poll()


def _pipeline_results(conn: psycopg.Connection[Any], poller: select.poll) -> list[PGresult]:
    """Flush a pipeline and read it up to its Sync: one result per statement (a statement
    skipped after an earlier error reports PIPELINE_ABORTED)."""
    pgconn = conn.pgconn
    _flush(pgconn, poller)
    results: list[PGresult] = []
    while True:
        # _next_result, inlined: this loop runs for every result of every pipeline
        while pgconn.is_busy():
            _wait(pgconn, poller, select.POLLIN)
            _consume(conn)
        result = pgconn.get_result()
        if result is None:  # the end of one statement's results
            if pgconn.status != ConnStatus.OK:
                raise psycopg.OperationalError("the connection to the server was lost")
            continue
        if result.status == ExecStatus.PIPELINE_SYNC:
            return results
        results.append(result)


class Result:
    """One statement's result: ``rowcount`` (rows returned or affected) and its rows, loaded
    by psycopg's binary loaders and shaped by ``make_row`` (a callable over the values)."""

    __slots__ = ("_adapter", "_pgresult")

    def __init__(self, pgresult: PGresult, adapter: Adapter) -> None:
        self._pgresult, self._adapter = pgresult, adapter

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
        adapter = self._adapter
        adapter.set_pgresult(self._pgresult)
        return adapter.load_rows(0, self._pgresult.ntuples, make_row)

    def first(self, make_row: Callable[[Sequence[Any]], T]) -> T | None:
        """The first row as ``make_row(values)``, or None when there is none."""
        if not self._pgresult.ntuples:
            return None
        adapter = self._adapter
        adapter.set_pgresult(self._pgresult)
        return adapter.load_row(0, make_row)


def _sqlstate(result: PGresult) -> str:
    state = result.error_field(DiagnosticField.SQLSTATE)
    return state.decode("ascii") if state else ""


def _check(conn: psycopg.Connection[Any], result: PGresult,
           ok: tuple[ExecStatus, ...]) -> None:
    """Raise the psycopg error of ``result`` unless its status is in ``ok``: the class of
    its SQLSTATE (e.g. AdminShutdown when the backend was terminated), or OperationalError
    when the connection broke without one."""
    if result.status in ok:
        return
    if not _sqlstate(result) and conn.pgconn.status != ConnStatus.OK:
        message = (result.error_message or b"").decode("utf-8", "replace").strip()
        raise psycopg.OperationalError(message or "the connection to the server was lost")
    raise errors.error_from_result(result, encoding=conn.info.encoding)
