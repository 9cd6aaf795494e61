"""Dropping the tests' throwaway PostgreSQL databases behind them, on one background thread.

On PostgreSQL 15 every ``DROP DATABASE`` waits for an immediate checkpoint of the whole
server (about 0.2–2 s on a two-core machine, more when the disk is busy), and the database a
test used is of no further use to it: the test's teardown hands the name here and goes on,
and the checkpoint overlaps the next test instead of adding to it. At most ``PENDING``
databases wait their turn (a test's teardown waits for room beyond that: a slow server
neither fills the disk with clones nor leaves a long drain for the end of the session);
``close`` (end of the session) waits until everything handed over is gone.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

import psycopg

PENDING = 8
ATTEMPTS = 5  # for a drop that met a concurrent catalog update


class Reaper:
    """Drops databases, then roles, in the order they were handed over, one at a time.

    ``drop(admin_url, database, *roles)``: ``admin_url`` is a superuser's URL on the
    database's server (not on the database itself); ``roles`` are dropped after the
    database (a role with grants in a database cannot be dropped before it).
    """

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, str, tuple[str, ...]] | None] = queue.Queue(PENDING)
        self._failures: list[str] = []
        self._thread = threading.Thread(target=self._run, name="pg-reaper", daemon=True)
        self._thread.start()

    def drop(self, admin_url: str, database: str, *roles: str) -> None:
        """Queue ``database`` and then ``roles`` for ``DROP … IF EXISTS``; returns at once
        unless ``PENDING`` drops are already waiting (then when one of them is done)."""
        self._queue.put((admin_url, database, roles))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            admin_url, database, roles = item
            for attempt in range(ATTEMPTS):
                try:
                    self._drop(admin_url, database, roles)
                    break
                except psycopg.errors.InternalError:
                    # "tuple concurrently updated": a DROP ROLE beside a test's own CREATE or
                    # GRANT on the catalog rows both touch; the drops are idempotent, retry
                    time.sleep(0.2 * (attempt + 1))
                except psycopg.Error as exc:
                    self._failures.append(f"{database}: {type(exc).__name__}")
                    break
            else:
                self._failures.append(f"{database}: InternalError x{ATTEMPTS}")

    @staticmethod
    def _drop(admin_url: str, database: str, roles: tuple[str, ...]) -> None:
        conn: psycopg.Connection[Any]
        with psycopg.connect(admin_url, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            for role in roles:
                conn.execute(f'DROP ROLE IF EXISTS "{role}"')

    def close(self) -> None:
        """Wait until every queued database and role is dropped; AssertionError naming the
        databases whose drop failed (their names only)."""
        self._queue.put(None)
        self._thread.join()
        if self._failures:
            raise AssertionError(f"could not drop: {', '.join(self._failures)}")
