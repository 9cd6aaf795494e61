"""The local Settings page's notification form over a fake of the owner's ops (docs/panel.md
"Pages", Settings): settings go to ``settings_set`` in order, write-only fields left empty
are not sent, and a change needs a sign-in within the last 15 minutes (the real owner and
browser: integration/panel/test_browser_local_notify.py)."""

from __future__ import annotations

import time
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette's TestClient prefers httpx2; httpx is installed
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from qinglong.panel.app import create_app
from qinglong.panel.backend import FEATURES
from qinglong.panel.security import Sessions

BASE = "http://testserver"


class NotifyBackend:
    profile = "local"
    features = FEATURES

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def available(self) -> bool:
        return True

    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        return {"tasks": [], "total": 0, "offset": offset, "limit": limit}

    def settings(self) -> dict[str, Any]:
        return {"profile": "standalone", "data_dir": "/d", "owner": None,
                "recovery": {"candidates": 0, "active_attempts": 0, "leftovers": 0},
                "channels": [], "notify_on": "failed", "notify_timeout_s": "10"}

    def settings_set(self, key: str, value: str | None) -> dict[str, Any]:
        self.calls.append((key, value))
        return {"key": key, "value": value}


def test_a_change_is_sent_in_order_and_needs_a_recent_sign_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    backend = NotifyBackend()
    client = TestClient(create_app(backend, Sessions("one-time"), None), base_url=BASE)
    client.get("/signin?token=one-time")
    page = client.get("/settings").text
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    form = {"csrf": csrf, "notify_on": ["failed", "succeeded"], "notify_timeout_s": "5",
            "notify_urls": "", "notify_webhook": "", "notify_webhook_clear": "1"}
    saved = client.post("/settings/notify", data=form, headers={"Origin": BASE},
                        follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"].endswith("?saved=1")
    assert backend.calls == [("notify_on", "failed,succeeded"), ("notify_timeout_s", "5"),
                             ("notify_webhook", None)]  # empty URLs: kept, not sent
    later = time.monotonic() + 16 * 60
    monkeypatch.setattr("qinglong.panel.security.time.monotonic", lambda: later)
    stale = client.post("/settings/notify", data=form, headers={"Origin": BASE},
                        follow_redirects=False)
    assert stale.status_code == 401 and len(backend.calls) == 3
