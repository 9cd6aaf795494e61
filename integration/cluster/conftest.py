"""Fixtures for the cluster tier: a fresh database per test, moto's S3 server (session) with
a fresh versioned bucket per test, and a ``Cluster`` that stops every process it started.
``private_cluster`` is the same on a PostgreSQL server of the test's own (``private_pg``),
for tests that stop or crash the database."""

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

from cluster_kit import LOCAL_PG, Cluster, ClusterDb, PrivatePostgres, pg_url  # noqa: E402
from s3_services import CREDS, moto_server, new_bucket  # noqa: E402

from pg_reaper import Reaper  # noqa: E402
from qinglong.control.retention.objects import make_client  # noqa: E402


@pytest.fixture(scope="session")
def cluster_moto() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def cluster_template() -> Iterator[ClusterDb]:
    """A database on the local PostgreSQL migrated once per session by ``ql3 control
    migrate``; each ``cluster`` database is a copy of it (``ClusterDb.create``)."""
    template = ClusterDb.template()
    try:
        yield template
    finally:
        template.drop()


def _cluster(tmp_path: Path, moto: str, server: str, *, reaper: Reaper | None,
             template: ClusterDb | None = None) -> Iterator[Cluster]:
    """A ``Cluster`` on a new database of ``server``; afterwards its processes are stopped and
    the database and its roles handed to ``reaper`` (None: left to whoever removes the
    server)."""
    db = ClusterDb.create(server, template=template)
    bucket = new_bucket(make_client(moto, timeout_s=5, **CREDS), versioned=True)
    c = Cluster(tmp_path, db, moto, bucket)
    try:
        yield c
    finally:
        c.close()
        if reaper is not None:
            reaper.drop(pg_url("postgres", "postgres", server), db.name, db.login_role,
                        db.runtime_role)


@pytest.fixture
def cluster(tmp_path: Path, cluster_moto: str, cluster_template: ClusterDb,
            pg_reaper: Reaper) -> Iterator[Cluster]:
    yield from _cluster(tmp_path, cluster_moto, LOCAL_PG, reaper=pg_reaper,
                        template=cluster_template)


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
    yield from _cluster(tmp_path, cluster_moto, private_pg.server, reaper=None)
