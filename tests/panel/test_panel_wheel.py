"""The qinglong-panel wheel (panel/pyproject.toml): same version as qinglong, carries the
templates, catalogs, static and vendored files, and no test-only file."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_versions_are_equal_and_web_extra_pins_the_panel() -> None:
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    panel = tomllib.loads((ROOT / "panel" / "pyproject.toml").read_text())["project"]
    assert panel["version"] == root["version"]
    assert root["optional-dependencies"]["web"] == [f"qinglong-panel=={root['version']}"]
    assert f"qinglong=={root['version']}" in panel["dependencies"]
    assert not any("pydantic" in d or "fastapi" in d for d in panel["dependencies"])


@pytest.mark.integration
def test_the_wheel_carries_templates_catalogs_and_static_files(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    str(ROOT / "panel"), "-w", str(tmp_path)], check=True, timeout=240)
    (wheel,) = tmp_path.glob("qinglong_panel-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in ("qinglong/panel/app.py", "qinglong/panel/templates/tasks.html",
                 "qinglong/panel/messages/zh-CN.json", "qinglong/panel/messages/en.json",
                 "qinglong/panel/static/logview.js", "qinglong/panel/static/vendor/htmx.min.js",
                 "qinglong/panel/static/vendor/ansi_up.js",
                 "qinglong/panel/static/vendor/pico.min.css"):
        assert want in names, want
    assert not any("axe" in n or n.startswith(("qinglong/local", "qinglong/shared"))
                   for n in names)
