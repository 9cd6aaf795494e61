"""Fixtures for running the chart's containers in bubblewrap: the session's moto S3 server
(``moto_session``, integration/conftest.py), and bubblewrap itself (missing: the test fails
with the reason; scripts/test.sh installs it with apt)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

_HERE = Path(__file__).resolve().parent
for _dir in (_HERE, _HERE.parents[1] / "tests" / "helm", _HERE.parent / "s3",
             _HERE.parent / "cluster"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))


@pytest.fixture(scope="session")
def helm_moto(moto_session: str) -> str:
    """The session's moto server (``moto_session``, integration/conftest.py)."""
    return moto_session


@pytest.fixture(scope="session")
def bwrap_ready() -> None:
    """bwrap and setpriv on PATH, and this test running as root (bwrap builds the mounts,
    then setpriv drops to the pod's uid): otherwise the test fails, naming what is missing."""
    import os

    missing = [tool for tool in ("bwrap", "setpriv") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: apt-get install -y bubblewrap "
                    "util-linux (scripts/test.sh does)")
    if os.geteuid() != 0:
        pytest.fail("the sandboxed runs need root (bwrap mounts, then setpriv drops to the "
                    "pod's uid)")
