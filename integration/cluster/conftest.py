"""Fixtures for the cluster tier: a fresh database per test (a copy of the session's migrated
``cluster_template``, made while the test before runs: ``cluster_dbs``, integration/conftest.py),
the session's moto S3 server with a fresh versioned bucket per test, and a ``Cluster`` that
stops every process it started. ``private_cluster`` is the same on a PostgreSQL server of the
test's own (``private_pg``), for tests that stop or crash the database."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("moto")
pytest.importorskip("httpx")

_HERE = Path(__file__).resolve().parent
for _dir in (_HERE, _HERE.parent / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

from cluster_kit import (  # noqa: E402
    Cluster,
    ClusterDb,
    PrivatePostgres,
    cluster_world,
)

from pg_ahead import Ahead  # noqa: E402
from pg_reaper import Reaper  # noqa: E402


@pytest.fixture(scope="session")
def cluster_moto(moto_session: str) -> str:
    """The session's moto server (``moto_session``, integration/conftest.py)."""
    return moto_session


@pytest.fixture
def cluster(tmp_path: Path, cluster_moto: str, cluster_dbs: Ahead[ClusterDb],
            pg_reaper: Reaper) -> Iterator[Cluster]:
    with cluster_world(tmp_path, cluster_moto, cluster_dbs.take(), reaper=pg_reaper) as c:
        yield c


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A started PostgreSQL server of this test's own; removed afterwards."""
    try:
        pg = PrivatePostgres()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        pg.start()
        yield pg
    finally:
        pg.close()


@pytest.fixture
def private_cluster(tmp_path: Path, cluster_moto: str,
                    private_pg: PrivatePostgres) -> Iterator[Cluster]:
    """``cluster`` on ``private_pg``: the test may stop, crash and start that server (the
    whole server is removed afterwards, so nothing is dropped one by one)."""
    with cluster_world(tmp_path, cluster_moto, ClusterDb.create(private_pg.server),
                       reaper=None) as c:
        yield c
