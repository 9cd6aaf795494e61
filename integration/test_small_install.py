"""A plain `pip install` of the built wheel, measured (README "Install on a server").

Builds the wheel (`pip wheel --no-deps`, as README "Install on a server" does), installs it
with its runtime dependencies into a fresh venv (the machine's pip configuration names the
index) and measures what the install added to site-packages: packages, bytes and files,
byte-compiled files included (pip writes them), the venv's own pip and setuptools excluded
(they are there before the install). ADR-0069's gate for the edge artifact: < 4 MiB and
< 512 files, our whole wheel included. The installed `ql3` must work there, and a zone the
machine has no tz database for must fail naming the `tzdata` extra.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 4 * 1024 * 1024
MAX_FILES = 512
NOT_IN_BASE = ("rich", "pygments", "markdown_it_py", "tzdata", "psycopg", "sqlalchemy",
               "boto3", "botocore", "fastapi", "pydantic", "httpx",
               # the web panel is `qinglong[web]` (docs/panel.md)
               "qinglong_panel", "starlette", "jinja2", "uvicorn", "python_multipart")


@dataclass
class Install:
    venv: Path
    site: Path
    packages: list[str]  # distribution names the install added
    files: int
    bytes: int
    by_top: dict[str, tuple[int, int]]  # top-level entry -> (files, bytes)


def _files(site: Path) -> dict[str, int]:
    return {str(p.relative_to(site)): p.stat().st_size
            for p in site.rglob("*") if p.is_file() and not p.is_symlink()}


def _run(*argv: str | Path, timeout: float = 120, **kw: object) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=timeout, check=False, **kw)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}: {proc.stderr[-2000:]}"
    return str(proc.stdout)


@pytest.fixture(scope="module")
def install(tmp_path_factory: pytest.TempPathFactory) -> Install:
    tmp = tmp_path_factory.mktemp("small-install")
    _run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", ROOT, "-w", tmp / "dist")
    (wheel,) = (tmp / "dist").glob("qinglong-*.whl")
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", venv)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    before = _files(site)
    _run(venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel, timeout=240)
    added = {p: s for p, s in _files(site).items() if p not in before}
    by_top: dict[str, tuple[int, int]] = {}
    for path, size in added.items():
        files, total = by_top.get(path.split("/")[0], (0, 0))
        by_top[path.split("/")[0]] = (files + 1, total + size)
    packages = sorted(t.split("-")[0] for t in by_top if t.endswith(".dist-info"))
    return Install(venv, site, packages, len(added), sum(added.values()), by_top)


def test_the_base_install_brings_no_rich_tzdata_or_cluster_library(install: Install) -> None:
    print(f"\nbase install: {len(install.packages)} packages ({', '.join(install.packages)}),"
          f" {install.bytes} bytes ({install.bytes / 1024 / 1024:.2f} MiB),"
          f" {install.files} files")
    for top, (files, size) in sorted(install.by_top.items(), key=lambda kv: -kv[1][1]):
        print(f"  {top:40} {files:4} files {size:9} bytes")
    assert "qinglong" in install.packages  # the measurement is of a real install
    lowered = [p.lower() for p in install.packages]
    assert [p for p in NOT_IN_BASE if p in lowered] == []
    assert install.files < MAX_FILES


def test_the_base_install_is_under_four_mib(install: Install) -> None:
    """ADR-0069's gate, with pip's byte-compiled files counted (a real install has them).
    Measured 4,084,360 bytes (3.90 MiB), 345 files: click (below 8.4: 8.5 is 115 KB larger),
    croniter (below 7, whose wheel carries a larger copy of its own tests), python-dateutil and
    six are about 2.2 MB of it;
    the launch wrapper ships as ``wrapper.pyw`` (a script run from a memfd, so pip does not
    byte-compile it) and the worker's path lock ships with the cluster wheel."""
    assert install.bytes < MAX_BYTES, f"{install.bytes} bytes"


def test_the_installed_ql3_runs_a_task_through_the_shipped_wrapper(
    install: Install, tmp_path: Path
) -> None:
    """The launch wrapper ships as ``wrapper.pyw`` (not byte-compiled by pip): a run from the
    installed wheel goes through it, succeeds and keeps its output (docs/protocols.md §3.2)."""
    wrapper = install.site / "qinglong" / "local" / "process" / "wrapper.pyw"
    assert wrapper.is_file()
    assert not list(wrapper.parent.glob("__pycache__/wrapper.*"))
    ql3 = install.venv / "bin" / "ql3"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["QL3_DATA_DIR"] = str(tmp_path / "data")
    _run(ql3, "local", "init", "--profile", "edge", env=env)
    _run(ql3, "local", "task", "add", "问候", "--schedule", "0 3 * * *", "--",
         "/bin/echo", "你好", env=env)
    out = subprocess.run([str(ql3), "local", "run", "问候", "--wait"], env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "你好" in out.stdout


def test_the_base_install_holds_no_cluster_code_and_says_what_to_install(
    install: Install,
) -> None:
    """ADR-0069: the edge artifact carries no cluster or worker code; asking for it names the
    distribution to install, exit 2, one line, and `ql3 --help` lists only what is there."""
    assert not (install.site / "qinglong" / "control").exists()
    assert not (install.site / "qinglong" / "worker").exists()
    ql3 = install.venv / "bin" / "ql3"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for command in ("control", "worker"):
        out = subprocess.run([str(ql3), command, "--help"], env=env, capture_output=True,
                             text=True, timeout=60, check=False)
        assert out.returncode == 2, out.stdout + out.stderr
        assert out.stderr.strip().splitlines() == [
            f"Error: `ql3 {command}` is part of the cluster distribution, which is not "
            f"installed: install `qinglong-cluster{'[control]' if command == 'control' else ''}`"
            ' beside this one (README, "Install on a server")']
    listed = _run(ql3, "--help", env=env)
    assert "local" in listed and "control" not in listed and "worker" not in listed


def test_the_installed_ql3_runs_and_names_the_tzdata_extra_without_a_tz_database(
    install: Install, tmp_path: Path
) -> None:
    ql3 = install.venv / "bin" / "ql3"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QL3_DATA_DIR")}
    assert _run(ql3, "--version", env=env).startswith("ql3, version ")
    data = tmp_path / "data"
    _run(ql3, "local", "init", "--data-dir", data, "--profile", "edge", env=env)
    env["QL3_DATA_DIR"] = str(data)
    _run(ql3, "local", "task", "add", "utc", "--schedule", "0 3 * * *", "--", "true", env=env)
    # no tz database at all: the system's hidden (an empty TZPATH), tzdata not installed
    bare = dict(env, PYTHONTZPATH=str(tmp_path / "no-zoneinfo"))
    _run(ql3, "local", "task", "add", "utc2", "--schedule", "0 3 * * *", "--", "true", env=bare)
    zoned = subprocess.run(
        [str(ql3), "local", "task", "add", "sh", "--schedule", "0 3 * * *",
         "--timezone", "Asia/Shanghai", "--", "true"],
        env=bare, capture_output=True, text=True, timeout=60, check=False)
    assert zoned.returncode == 2, zoned.stderr
    assert "time zone 'Asia/Shanghai' not found: install the system tz database or " \
           "`pip install qinglong[tzdata]`" in zoned.stderr
    if Path("/usr/share/zoneinfo/Asia/Shanghai").exists():  # the system's database serves
        _run(ql3, "local", "task", "add", "sh", "--schedule", "0 3 * * *",
             "--timezone", "Asia/Shanghai", "--", "true", env=env)
        listed = _run(ql3, "local", "task", "list", env=dict(env, COLUMNS="80"))
        assert all(len(line) <= 80 for line in listed.splitlines()), listed


def test_the_base_install_has_no_panel_and_web_names_the_extra(
    install: Install, tmp_path: Path
) -> None:
    """docs/panel.md: the panel is the `qinglong-panel` distribution (`qinglong[web]`); the
    edge install carries none of it and `ql3 local web` says what to install, exit 2."""
    assert not (install.site / "qinglong" / "panel").exists()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["QL3_DATA_DIR"] = str(tmp_path / "data")
    out = subprocess.run([str(install.venv / "bin" / "ql3"), "local", "web"], env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip() == (
        "ql3: error: the web panel is not installed: pip install 'qinglong[web]'")
