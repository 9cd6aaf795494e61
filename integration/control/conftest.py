"""Fixtures for the control-plane PostgreSQL tests: one migrated template per session,
cloned per test with ``CREATE DATABASE … TEMPLATE`` and a fresh runtime role each (the next
test's clone made while the current test runs: ``pg_clones``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")

from pg_control_db import (  # noqa: E402
    PgDb,
    admin,
    db_url,
    drop_clone,
    drop_database,
    drop_role,
    new_clone,
    unique,
)

from pg_ahead import Ahead  # noqa: E402
from pg_reaper import Reaper  # noqa: E402
from qinglong.control.db.engine import create_engine  # noqa: E402
from qinglong.control.db.migrations import migrate  # noqa: E402


@pytest.fixture(scope="session")
def pg_template(pg_reaper: Reaper) -> Iterator[PgDb]:
    """A database migrated once per session; never connected to while tests clone it.
    Dropped by ``pg_reaper`` after every clone handed to it before (its clones hold grants
    to its runtime role)."""
    template = PgDb(unique("ql3t_tmpl"), unique("ql3rt_tmpl"))
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{template.name}"')
    try:
        engine = create_engine(db_url(template.name), pool_size=1, max_overflow=0)
        try:
            with engine.connect() as conn:
                migrate(conn, runtime_role=template.runtime_role)
        finally:
            engine.dispose()  # nobody may stay connected to a template
        yield template
    finally:
        pg_reaper.drop(db_url("postgres"), template.name, template.runtime_role)


@pytest.fixture(scope="session")
def pg_clones(pg_template: PgDb, pg_reaper: Reaper) -> Iterator[Ahead[PgDb]]:
    """Clones of ``pg_template`` (``new_clone``), each made while the test before its own
    runs (``pg_ahead.Ahead``); the one left over at the end is dropped."""
    ahead = Ahead(lambda: new_clone(pg_template), lambda db: drop_clone(db, pg_reaper))
    yield ahead
    ahead.close()


@pytest.fixture
def pg_db(pg_clones: Ahead[PgDb], pg_reaper: Reaper) -> Iterator[PgDb]:
    """A migrated database of this test only, with its own runtime role; dropped after (by
    ``pg_reaper``, behind the test)."""
    db = pg_clones.take()
    try:
        yield db
    finally:
        drop_clone(db, pg_reaper)


@pytest.fixture
def empty_db() -> Iterator[PgDb]:
    """An empty database (no migrations) of this test only."""
    db = PgDb(unique("ql3t_empty"), unique("ql3rt"))
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{db.name}"')
    try:
        yield db
    finally:
        drop_database(db.name)
        drop_role(db.runtime_role)


@pytest.fixture
def api(pg_db: PgDb) -> Iterator[Any]:
    """The API over ``pg_db`` as its runtime role, with a token of every scope
    (``api_world.ApiWorld``)."""
    from api_world import close_world, open_world

    world = open_world(pg_db)
    try:
        yield world
    finally:
        close_world(world)
