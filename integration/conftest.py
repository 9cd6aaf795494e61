"""Fixtures for the integration tier."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness import initialised_data_dir, ql3

if TYPE_CHECKING:
    from cluster_kit import ClusterDb

    from pg_ahead import Ahead
    from pg_reaper import Reaper

__all__ = ["initialised_data_dir", "pg_reaper", "ql3"]

_HERE = Path(__file__).resolve().parent


def _kit_path() -> None:
    """``cluster_kit`` and ``s3_services`` importable (integration/cluster, integration/s3)."""
    for sub in ("cluster", "s3"):
        if str(_HERE / sub) not in sys.path:
            sys.path.insert(0, str(_HERE / sub))


@pytest.fixture(scope="session")
def pg_reaper() -> Iterator[Reaper]:
    """Drops the session's throwaway databases behind the tests (``pg_reaper.Reaper``); at
    the end of the session, waits until all are gone."""
    from pg_reaper import Reaper

    reaper = Reaper()
    yield reaper
    reaper.close()


@pytest.fixture(scope="session")
def moto_session() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of the session's one moto S3 server process (stopped at the
    end), shared by every tier that only needs a bucket of its own (``new_bucket``: a fresh,
    randomly named one per user): the S3, sweeper, cluster, helm and cluster-panel tests. A
    test that stops its S3 server starts a server of its own."""
    pytest.importorskip("moto")
    _kit_path()
    from s3_services import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def cluster_template(pg_reaper: Reaper) -> Iterator[ClusterDb]:
    """A database on the local PostgreSQL migrated once per session by ``ql3 control
    migrate``; each cluster test's database is a copy of it (``ClusterDb.create``).
    Dropped by ``pg_reaper`` after every copy handed to it before."""
    pytest.importorskip("psycopg")
    pytest.importorskip("httpx")
    _kit_path()
    from cluster_kit import ClusterDb, pg_url

    template = ClusterDb.template()
    try:
        yield template
    finally:
        pg_reaper.drop(pg_url("postgres", "postgres", template.server), template.name,
                       template.login_role, template.runtime_role)


@pytest.fixture(scope="session")
def cluster_dbs(cluster_template: ClusterDb, pg_reaper: Reaper) -> Iterator[Ahead[ClusterDb]]:
    """Copies of ``cluster_template`` (``ClusterDb.create``), each made while the test before
    its own runs (``pg_ahead.Ahead``); whoever takes one drops it (``cluster_world`` hands it
    to ``pg_reaper``); the one left over at the end is dropped here."""
    from cluster_kit import ClusterDb, pg_url

    from pg_ahead import Ahead

    def discard(db: ClusterDb) -> None:
        pg_reaper.drop(pg_url("postgres", "postgres", db.server), db.name, db.login_role,
                       db.runtime_role)

    ahead = Ahead(lambda: ClusterDb.create(template=cluster_template), discard)
    yield ahead
    ahead.close()
