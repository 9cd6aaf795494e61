"""Every url() in the panel's own stylesheets names a file the panel ships, relative to the
stylesheet itself, and none sits in a custom property: a url() in a custom property resolves
against the stylesheet that uses the var() (Pico's, in static/vendor/), which made the
checkbox and select icons 404 (docs/panel.md "Security headers": images are files, no data:)."""

from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "panel" / "qinglong" / "panel" / "static"
URL = re.compile(r"""url\(\s*["']?([^"')]+)["']?\s*\)""")
CUSTOM_WITH_URL = re.compile(r"--[\w-]+\s*:[^;{}]*url\(")


def _own_stylesheets() -> list[Path]:
    return sorted(p for p in STATIC.rglob("*.css") if "vendor" not in p.parts)


def test_every_url_in_our_css_names_a_shipped_file_beside_the_stylesheet() -> None:
    seen = 0
    for css in _own_stylesheets():
        for target in URL.findall(css.read_text(encoding="utf-8")):
            assert not target.startswith(("data:", "http:", "https:", "/")), (css, target)
            assert (css.parent / target).resolve().is_file(), (css.name, target)
            seen += 1
    assert seen >= 3  # the checkbox, minus and chevron icons at least


def test_no_custom_property_of_ours_holds_a_url() -> None:
    for css in _own_stylesheets():
        text = re.sub(r"/\*.*?\*/", "", css.read_text(encoding="utf-8"), flags=re.S)
        assert not CUSTOM_WITH_URL.search(text), css.name
