"""Fixtures for the panel tier: one chromium for the whole session; the cluster's kits
(``integration/cluster``, ``integration/s3``) importable by the cluster panel modules."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_INTEGRATION = Path(__file__).resolve().parents[1]
for _dir in (_INTEGRATION / "cluster", _INTEGRATION / "s3"):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """Debian's chromium-headless-shell driven by playwright, launched once per session (a
    driver and a browser per module took seconds each). Every module and test opens browser
    contexts of its own (cookies, storage, locale and viewport of their own); a module's
    world closes what it left open when it ends (``panel_harness.close_contexts``)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    path = shutil.which("chromium-headless-shell") or "/usr/bin/chromium-headless-shell"
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path)
        try:
            yield browser
        finally:
            browser.close()
