"""Fixtures for the S3 tier: moto's server in a subprocess, our fault proxy in front of it.

``moto_endpoint`` (session): the session's ``python -m moto.server`` on 127.0.0.1 and a free
port (``moto_session``, integration/conftest.py), stopped at the end. ``proxy`` (per test):
``fault_proxy.py`` as its own process with a fresh config and DELETE log; ``proxy.set(...)``
changes faults, ``proxy.deletes()`` reads the log. Every fixture stops the processes it
started.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

from s3_services import CREDS, FaultProxy, new_bucket

from qinglong.control.retention.objects import make_client


@pytest.fixture(scope="session")
def moto_endpoint(moto_session: str) -> str:
    """``http://127.0.0.1:PORT`` of the session's moto server process (``moto_session``,
    integration/conftest.py)."""
    return moto_session


# The fixtures below work on any S3 server: another tier (integration/s3_minio) loads this
# module and overrides ``s3_endpoint`` and ``s3_credentials``.
@pytest.fixture(scope="session")
def s3_endpoint(moto_endpoint: str) -> str:
    """The S3 server the tier talks to (here moto)."""
    return moto_endpoint


@pytest.fixture(scope="session")
def s3_credentials() -> dict[str, str]:
    """``make_client`` credentials for ``s3_endpoint``."""
    return dict(CREDS)


@pytest.fixture
def proxy(tmp_path: Path, s3_endpoint: str) -> Iterator[FaultProxy]:
    fp = FaultProxy(tmp_path, s3_endpoint)
    try:
        yield fp
    finally:
        fp.stop()


@pytest.fixture
def s3(proxy: FaultProxy, s3_credentials: dict[str, str]) -> Any:
    """A boto3 client that goes through the proxy (one attempt, path style)."""
    return make_client(proxy.endpoint, timeout_s=5, **s3_credentials)


@pytest.fixture
def direct_s3(s3_endpoint: str, s3_credentials: dict[str, str]) -> Any:
    """A boto3 client straight to the server (test setup and out-of-band re-uploads)."""
    return make_client(s3_endpoint, timeout_s=5, **s3_credentials)


@pytest.fixture
def make_bucket(direct_s3: Any) -> Callable[[bool], str]:
    def make(versioned: bool) -> str:
        return new_bucket(direct_s3, versioned)

    return make
