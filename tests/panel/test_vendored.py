"""The vendored front-end files match panel/vendor-manifest.json (scripts/vendor_panel.py
writes both; DESIGN §4.6: versions and sha256 in a manifest, no CDN)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = json.loads((ROOT / "panel" / "vendor-manifest.json").read_text())


def test_every_vendored_file_has_the_manifest_sha256_and_version() -> None:
    names = set()
    for entry in MANIFEST["files"]:
        data = (ROOT / entry["dest"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], entry["dest"]
        assert len(data) == int(entry["bytes"])
        assert re.fullmatch(r"\d+\.\d+\.\d+", entry["version"])
        assert entry["tarball"].startswith("https://registry.npmjs.org/")
        names.add(entry["package"])
    assert names == {"htmx.org", "ansi_up", "@picocss/pico", "axe-core"}


def test_the_package_ships_no_unlisted_vendor_file_and_no_test_only_file() -> None:
    vendor = ROOT / "panel" / "qinglong" / "panel" / "static" / "vendor"
    listed = {ROOT / e["dest"] for e in MANIFEST["files"]}
    assert set(vendor.iterdir()) <= listed
    axe = next(e for e in MANIFEST["files"] if e["package"] == "axe-core")
    assert not axe["dest"].startswith("panel/")  # tests only, never in the wheel


def test_templates_load_nothing_from_another_origin() -> None:
    templates = ROOT / "panel" / "qinglong" / "panel" / "templates"
    for path in templates.glob("*.html"):
        text = path.read_text()
        assert not re.search(r"""(src|href)=["'](https?:)?//""", text), path.name
        assert "<style" not in text and " style=" not in text, path.name  # CSP: no inline
        assert not re.search(r"<script(?![^>]*\bsrc=)", text), path.name
