"""The cluster distribution (`cluster/pyproject.toml`, docs/architecture.md §1), installed.

Both wheels are built as README "Install on a server" says (`pip wheel --no-deps . ./cluster`)
and installed into fresh venvs the two ways a cluster machine uses them: a worker (both wheels,
no extra: HTTP only, no database or bucket library; `ql3 cluster` comes with it) and a control
replica (`[control]`). In
each, `ql3` must run the commands that machine needs, find the packaged PostgreSQL migrations,
and a worker install must name the extra a control command needs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QL3_DATA_DIR")}


def _run(*argv: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=timeout, check=False, env=ENV)


def _ok(*argv: str | Path, timeout: float = 300) -> str:
    proc = _run(*argv, timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(base, cluster, panel) wheels: `[control]` requires the panel's, on no index."""
    dist = tmp_path_factory.mktemp("cluster-wheels")
    _ok(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", ROOT, ROOT / "cluster",
        ROOT / "panel", "-w", dist)
    (base,) = dist.glob("qinglong-*.whl")
    (cluster,) = dist.glob("qinglong_cluster-*.whl")
    (panel,) = dist.glob("qinglong_panel-*.whl")
    return base, cluster, panel


def _pip(venv: Path, *args: str) -> str:
    """This interpreter's pip run by ``venv``'s interpreter (``pip --python``): what the
    venv's own pip would do there, without installing pip into every fresh venv."""
    return _ok(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", *args)


def _venv(where: Path, *requirements: str) -> Path:
    """A fresh venv with ``requirements`` installed, not byte-compiled (an import compiles
    what it loads; compiling every installed module up front was most of the install's
    time)."""
    _ok(sys.executable, "-m", "venv", "--without-pip", where)
    _pip(where, "install", "--quiet", "--no-compile", *requirements)
    return where


def _packages(venv: Path) -> set[str]:
    out = _pip(venv, "list", "--format=freeze")
    return {line.split("==")[0].lower() for line in out.splitlines()}


def test_both_distributions_have_one_version() -> None:
    """The cluster wheel pins the base wheel at exactly its own version."""
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    cluster = tomllib.loads((ROOT / "cluster" / "pyproject.toml").read_text())["project"]
    assert cluster["version"] == root["version"]
    assert f"qinglong=={root['version']}" in cluster["dependencies"]
    # every control replica serves the panel at /ui (docs/panel.md "Cluster")
    assert f"qinglong-panel=={root['version']}" in cluster["optional-dependencies"]["control"]
    assert not any("panel" in d for d in cluster["dependencies"])  # workers: never


def test_a_worker_install_runs_the_worker_and_holds_no_database_library(
    wheels: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    base, cluster, _ = wheels
    venv = _venv(tmp_path / "worker", str(base), str(cluster))
    installed = _packages(venv)
    assert {"qinglong", "qinglong-cluster", "httpx"} <= installed
    assert not installed & {"psycopg", "psycopg-binary", "sqlalchemy", "boto3", "fastapi",
                            "qinglong-panel", "starlette", "jinja2"}
    ql3 = venv / "bin" / "ql3"
    assert "--control-url" in _ok(ql3, "worker", "run", "--help")
    assert "workers" in _ok(ql3, "cluster", "--help")  # the client ships with the workers
    out = _run(ql3, "cluster", "runs", "--control-url", "http://127.0.0.1:1")
    assert (out.returncode, out.stderr) == (2, "ql3: error: QL3_TOKEN: not set: export a token "
                                               "issued by `ql3 control token create` (never put "
                                               "it on the command line)\n")
    out = _run(ql3, "control", "readiness", "--database-url", "postgresql://x@127.0.0.1:1/x")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "needs the 'control' extra" in out.stderr
    assert "install `qinglong-cluster[control]`" in out.stderr


def test_a_control_install_finds_its_packaged_migrations(
    wheels: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    base, cluster, panel = wheels
    venv = _venv(tmp_path / "control", str(base), str(panel), f"{cluster}[control]")
    assert {"psycopg", "sqlalchemy", "boto3", "fastapi", "qinglong-panel", "starlette",
            "jinja2"} <= _packages(venv)
    # the replica's app mounts the panel at /ui (it is there to import)
    _ok(venv / "bin" / "python", "-c", "import qinglong.panel.app")
    requires = _ok(venv / "bin" / "python", "-c", "from importlib.metadata import requires; "
                   "print(*requires('qinglong-cluster'), sep='\\n')").splitlines()
    assert "qinglong-panel==3.0.0a1; extra == 'control'" in requires
    ql3 = venv / "bin" / "ql3"
    assert "migrate" in _ok(ql3, "control", "--help")
    code = ("from qinglong.control.db.migrations import migrations_dir, load_migration_files;"
            "print(migrations_dir()); print(len(load_migration_files()))")
    where, count = _ok(venv / "bin" / "python", "-c", code).split()
    assert where.startswith(str(venv)) and where.endswith("migrations_postgres")
    files = [p for p in (ROOT / "migrations" / "postgres").iterdir()
             if re.fullmatch(r"\d{4}-[a-z0-9-]+\.sql", p.name)]
    assert int(count) == len(files) > 0
