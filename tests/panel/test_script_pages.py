"""The local Scripts page over a fake backend (docs/panel.md "Scripts"): editing needs a
sign-in within 15 minutes and a stale save shows the typed text again, a refused save keeps
it too, the textarea's CRLF line ends go back to the file's own, file content is escaped,
and the cluster's bundle pages answer 501 in the local profile."""

from __future__ import annotations

import hashlib
import re
import time
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from qinglong.panel.app import create_app
from qinglong.panel.backend import FEATURES, BackendRefusedError
from qinglong.panel.security import Sessions

BASE = "http://testserver"
EVIL = "<script>alert(1)</script>"


class ScriptsBackend:
    profile = "local"
    features = FEATURES - {"bundles"}

    def __init__(self) -> None:
        self.files: dict[str, str] = {"签到.py": f"print('{EVIL}')\n"}
        self.writes: list[tuple[str, str, str]] = []

    def scripts_list(self) -> dict[str, Any]:
        return {"root": "/data/scripts", "truncated": False,
                "files": [{"path": p, "size": len(c.encode()), "modified_ms": 0}
                          for p, c in sorted(self.files.items())]}

    def script_read(self, path: str) -> dict[str, Any]:
        if path not in self.files:
            raise BackendRefusedError("not_found", "no such script", usage=True)
        text = self.files[path]
        return {"path": path, "content": text, "size": len(text.encode()),
                "version": hashlib.sha256(text.encode()).hexdigest()}

    def script_write(self, path: str, content: str, version: str) -> dict[str, Any]:
        current = self.files.get(path)
        if (hashlib.sha256(current.encode()).hexdigest() if current is not None
                else "") != version:
            raise BackendRefusedError("script_changed", "the file changed")
        self.writes.append((path, content, version))
        self.files[path] = content
        return {"path": path, "version": "", "size": 0, "created": current is None}


def _client() -> tuple[TestClient, ScriptsBackend]:
    backend = ScriptsBackend()
    client = TestClient(create_app(backend, Sessions("one-time")), base_url=BASE)
    client.get("/signin?token=one-time", follow_redirects=False)
    return client, backend


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def _version(page: str) -> str:
    found = re.search(r'name="version" value="([^"]*)"', page)
    assert found is not None
    return found.group(1)


def test_content_is_escaped_and_crlf_from_the_form_is_saved_as_lf() -> None:
    client, backend = _client()
    shown = client.get("/scripts/view", params={"path": "签到.py"}).text
    assert EVIL not in shown and "&lt;script&gt;" in shown
    page = client.get("/scripts/edit", params={"path": "签到.py"}).text
    saved = client.post("/scripts/save", headers={"Origin": BASE}, follow_redirects=False,
                        data={"csrf": _csrf(page), "path": "签到.py", "crlf": "0",
                              "version": _version(page), "content": "a\r\nb\r\n"})
    assert saved.status_code == 303
    assert backend.files["签到.py"] == "a\nb\n"


def test_a_refused_save_shows_the_typed_text_again() -> None:
    client, backend = _client()
    page = client.get("/scripts/edit", params={"path": "签到.py"}).text
    backend.files["签到.py"] = "changed elsewhere"
    refused = client.post("/scripts/save", headers={"Origin": BASE}, data={
        "csrf": _csrf(page), "path": "签到.py", "version": _version(page),
        "content": "我的 <b>修改</b>"})
    assert refused.status_code == 409
    assert "我的 &lt;b&gt;修改&lt;/b&gt;" in refused.text
    assert backend.files["签到.py"] == "changed elsewhere" and backend.writes == []


def test_editing_needs_a_sign_in_within_15_minutes(monkeypatch: pytest.MonkeyPatch) -> None:
    client, backend = _client()
    page = client.get("/scripts/edit", params={"path": "签到.py"}).text
    later = time.monotonic() + 16 * 60
    monkeypatch.setattr("qinglong.panel.security.time.monotonic", lambda: later)
    assert client.get("/scripts/edit", params={"path": "签到.py"}).status_code == 401
    assert client.get("/scripts/new").status_code == 401
    stale = client.post("/scripts/save", headers={"Origin": BASE}, data={
        "csrf": _csrf(page), "path": "签到.py", "version": _version(page),
        "content": "不会丢的文字"})
    assert stale.status_code == 401 and "不会丢的文字" in stale.text
    assert backend.writes == []
    assert client.get("/scripts").status_code == 200  # reading stays allowed
    assert client.get("/scripts/view", params={"path": "签到.py"}).status_code == 200


def test_bundle_pages_are_not_in_the_local_profile() -> None:
    client, _ = _client()
    assert client.get("/bundles").status_code == 501
    assert "/bundles" not in client.get("/scripts").text


def test_switching_the_language_stays_on_the_same_file() -> None:
    client, _ = _client()
    page = client.get("/scripts/view", params={"path": "签到.py"}).text
    switched = client.post(f"/lang?next={_lang_next(page)}", headers={"Origin": BASE},
                           data={"csrf": _csrf(page), "lang": "en"}, follow_redirects=False)
    assert switched.status_code == 303
    assert client.get(switched.headers["location"]).status_code == 200
    assert "path=" in switched.headers["location"]


def _lang_next(page: str) -> str:
    found = re.search(r'action="/lang\?next=([^"]+)"', page)
    assert found is not None
    return found.group(1)
