"""Fixtures of the failure drills (pytest marker ``drill``): an HA PostgreSQL cluster under
Patroni with etcd on loopback ports (``patroni_kit.py``), and moto's S3 server behind our
loopback proxy that records every DELETE (``integration/s3/fault_proxy.py``, no faults set).

A machine without the drill's tools (etcd, the Patroni venv of ``scripts/drill_env.sh``,
root) skips the drill, unless ``QL3_DRILL_REQUIRED=1`` (``scripts/test.sh`` sets it after
installing them): then it fails, so CI never passes by skipping it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("moto")
pytest.importorskip("httpx")

_HERE = Path(__file__).resolve().parent
for _dir in (_HERE, _HERE.parent / "cluster", _HERE.parent / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))

from patroni_kit import PatroniCluster  # noqa: E402
from s3_services import FaultProxy, moto_server  # noqa: E402


@pytest.fixture
def ha_postgres() -> Iterator[PatroniCluster]:
    """Three Patroni members and etcd, settled (leader, synchronous standby, replica);
    everything stopped and removed afterwards."""
    try:
        ha = PatroniCluster()
    except RuntimeError as exc:
        if os.environ.get("QL3_DRILL_REQUIRED") == "1":
            pytest.fail(f"the drill cannot run here: {exc}")
        pytest.skip(str(exc))
    try:
        ha.start()
        yield ha
    finally:
        ha.close()


@pytest.fixture
def s3_behind_proxy(tmp_path: Path) -> Iterator[tuple[str, FaultProxy]]:
    """(moto's endpoint, a proxy in front of it that logs every DELETE)."""
    with moto_server() as endpoint:
        proxy = FaultProxy(tmp_path, endpoint)
        try:
            yield endpoint, proxy
        finally:
            proxy.stop()
