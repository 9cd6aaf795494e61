"""Fixtures for the sweeper and read-path tier: real PostgreSQL (cloned migrated template, own
runtime role) plus moto's server behind ``fault_proxy.py``.

The fixtures of ``integration/control`` and ``integration/s3`` are loaded from their conftest
files under unique module names and re-exported here, so this directory runs on its own.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("psycopg")
pytest.importorskip("boto3")
pytest.importorskip("moto")

_TIER = Path(__file__).resolve().parent.parent
for _dir in (_TIER / "control", _TIER / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))


def _load(name: str, path: Path) -> ModuleType:
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_pg = _load("ql3_sweep_pg_fixtures", _TIER / "control" / "conftest.py")
_s3 = _load("ql3_sweep_s3_fixtures", _TIER / "s3" / "conftest.py")

pg_template = _pg.pg_template
pg_clones = _pg.pg_clones
pg_db = _pg.pg_db
empty_db = _pg.empty_db
moto_endpoint = _s3.moto_endpoint
s3_endpoint = _s3.s3_endpoint
s3_credentials = _s3.s3_credentials
proxy = _s3.proxy
s3 = _s3.s3
direct_s3 = _s3.direct_s3
make_bucket = _s3.make_bucket
