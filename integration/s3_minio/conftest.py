"""Fixtures for the MinIO tier: a real MinIO server in a container (testcontainers), our fault
proxy in front of it. Runs where a Docker engine answers; elsewhere every test is skipped with
the reason (``pytest -rs`` prints it). This tier does not count toward done.

``minio_endpoint`` (session): ``testcontainers.community.minio.MinioContainer`` started once,
stopped at the end; image ``QL3_MINIO_IMAGE`` (default a pinned MinIO release).
``minio_verdict`` (session): ``probe_conditional_delete`` against that server, the verdict the
tests' expectations follow. ``proxy`` (per test): ``fault_proxy.py`` in front of MinIO (from
``integration/s3/s3_services.py``). ``s3`` goes through the proxy, ``direct_s3`` straight to
MinIO; ``make_bucket(versioned)`` creates a fresh bucket.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("boto3")

from qinglong.control.retention.objects import make_client
from qinglong.control.retention.probe import ProbeVerdict, probe_conditional_delete

# The S3 tier's helpers (s3_services, artifacts) are imported as plain modules from there.
_S3_TIER = Path(__file__).resolve().parent.parent / "s3"
if str(_S3_TIER) not in sys.path:
    sys.path.insert(0, str(_S3_TIER))

from s3_services import new_bucket  # noqa: E402

MINIO_IMAGE = os.environ.get("QL3_MINIO_IMAGE",
                             "quay.io/minio/minio:RELEASE.2025-04-22T22-12-26Z")
MINIO_USER = "ql3minio"
MINIO_PASSWORD = "ql3minio-secret"  # a throwaway container credential


def _minio_container_class() -> Any:
    """``MinioContainer`` (testcontainers >= 4.15 moved it to ``testcontainers.community``)."""
    try:
        from testcontainers.community.minio import MinioContainer
    except ImportError:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            from testcontainers.minio import MinioContainer
    return MinioContainer


def _docker_engine_error() -> str | None:
    """None when the Docker engine testcontainers would use answers a ping, else why not."""
    with warnings.catch_warnings():
        # A failed docker.from_env() leaves its unix socket to the GC (a ResourceWarning).
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            from testcontainers.core.docker_client import DockerClient
            client = DockerClient().client
            try:
                client.ping()
            finally:
                client.close()
        except Exception as exc:  # any failure means: no usable engine
            return f"{type(exc).__name__}: {exc}"
        finally:
            gc.collect()
    return None


@pytest.fixture(scope="session")
def minio_endpoint() -> Iterator[str]:
    """``http://HOST:PORT`` of a MinIO container; skips the tier when it cannot run here."""
    try:
        container_class = _minio_container_class()
    except ImportError as exc:
        pytest.skip(f"MinIO tier: testcontainers[minio] not importable: {exc}")
    error = _docker_engine_error()
    if error is not None:
        pytest.skip(f"MinIO tier: no Docker engine: {error}")
    container = container_class(MINIO_IMAGE, access_key=MINIO_USER, secret_key=MINIO_PASSWORD)
    # Newer MinIO releases read only the ROOT_* names; older ones the ACCESS/SECRET_KEY ones.
    container.with_env("MINIO_ROOT_USER", MINIO_USER)
    container.with_env("MINIO_ROOT_PASSWORD", MINIO_PASSWORD)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", ResourceWarning)
        container.start()
    try:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(container.port)
        yield f"http://{host}:{port}"
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", ResourceWarning)
            container.stop()


def _load_s3_fixtures() -> ModuleType:
    """The S3 tier's conftest under a unique module name (its fixtures are reused here)."""
    name = "ql3_minio_s3_fixtures"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _S3_TIER / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_s3 = _load_s3_fixtures()
proxy = _s3.proxy
s3 = _s3.s3
direct_s3 = _s3.direct_s3
make_bucket = _s3.make_bucket
CREDENTIALS = {"aws_access_key_id": MINIO_USER, "aws_secret_access_key": MINIO_PASSWORD}


@pytest.fixture(scope="session")
def s3_endpoint(minio_endpoint: str) -> str:
    """The S3 tier's fixtures talk to MinIO here."""
    return minio_endpoint


@pytest.fixture(scope="session")
def s3_credentials() -> dict[str, str]:
    return dict(CREDENTIALS)


@pytest.fixture(scope="session")
def minio_verdict(minio_endpoint: str) -> ProbeVerdict:
    """The conditional-delete probe's verdict on this MinIO (an unversioned bucket)."""
    client = make_client(minio_endpoint, timeout_s=10, **CREDENTIALS)
    return probe_conditional_delete(client, new_bucket(client, False),
                                    in_transaction=lambda: False)
