"""Fixtures for the cluster tier: a fresh database per test, moto's S3 server (session) with
a fresh versioned bucket per test, and a ``Cluster`` that stops every process it started."""

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

from cluster_kit import Cluster, ClusterDb  # noqa: E402
from s3_services import CREDS, moto_server, new_bucket  # noqa: E402

from qinglong.control.retention.objects import make_client  # noqa: E402


@pytest.fixture(scope="session")
def cluster_moto() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def cluster(tmp_path: Path, cluster_moto: str) -> Iterator[Cluster]:
    db = ClusterDb.create()
    bucket = new_bucket(make_client(cluster_moto, timeout_s=5, **CREDS), versioned=True)
    c = Cluster(tmp_path, db, cluster_moto, bucket)
    try:
        yield c
    finally:
        c.close()
        db.drop()
