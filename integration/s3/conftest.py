"""Fixtures for the S3 tier: moto's server in a subprocess, our fault proxy in front of it.

``moto_endpoint`` (session): ``python -m moto.server`` on 127.0.0.1 and a free port, stopped at
the end. ``proxy`` (per test): ``fault_proxy.py`` as its own process with a fresh config and
DELETE log; ``proxy.set(...)`` changes faults, ``proxy.deletes()`` reads the log. Every fixture
stops the processes it started.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

from s3_services import CREDS, FaultProxy, moto_server

from qinglong.control.retention.objects import make_client


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto server process."""
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def proxy(tmp_path: Path, moto_endpoint: str) -> Iterator[FaultProxy]:
    fp = FaultProxy(tmp_path, moto_endpoint)
    try:
        yield fp
    finally:
        fp.stop()


@pytest.fixture
def s3(proxy: FaultProxy) -> Any:
    """A boto3 client that goes through the proxy (one attempt, path style)."""
    return make_client(proxy.endpoint, timeout_s=5, **CREDS)


@pytest.fixture
def direct_s3(moto_endpoint: str) -> Any:
    """A boto3 client straight to moto (test setup and out-of-band re-uploads)."""
    return make_client(moto_endpoint, timeout_s=5, **CREDS)


@pytest.fixture
def make_bucket(direct_s3: Any) -> Callable[[bool], str]:
    def make(versioned: bool) -> str:
        name = f"ql3-{uuid.uuid4().hex[:20]}"
        direct_s3.create_bucket(Bucket=name)
        if versioned:
            direct_s3.put_bucket_versioning(
                Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name

    return make
