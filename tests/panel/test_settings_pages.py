"""The Settings page over fakes of its ports, mounted at ``/ui`` with a token sign-in store
as control serves it (docs/panel.md "Cluster", Settings): an admin's page lists channels,
tokens and sign-ins escaped, a new token is on its answer page only, an operator's and a
viewer's writes are 403 before the backend is called, and the revoke page asks first.
The real store and backend run in integration/panel/test_cluster_browser.py."""

from __future__ import annotations

import secrets
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette's TestClient prefers httpx2; httpx is installed
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from starlette.applications import Starlette
from starlette.routing import Mount
from test_app_mounted import TokenStore

from qinglong.panel.app import create_app
from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError
from qinglong.panel.security import Session

BASE = "http://testserver"
EVIL = "<script>alert(1)</script>"
TOKEN_ID = "0190aaaa-0000-7000-8000-000000000001"


class AdminTokenStore(TokenStore):
    """TokenStore plus ``ql3_admin``."""

    def sign_in(self, token: str, client: str) -> Session:
        if token != "ql3_admin":
            return super().sign_in(token, client)
        session = Session(secrets.token_urlsafe(16), secrets.token_urlsafe(32),
                          can_write=True, actor="admin", scope="admin")
        self.sessions[session.id] = session
        return session


class SettingsBackend:
    profile = "cluster"
    features = frozenset({"settings"})

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def settings(self) -> dict[str, Any]:
        return {"profile": "cluster", "admin": True,
                "channels": [{"id": "c1", "channel": "apprise", "target": f"json://{EVIL}/…",
                              "notify_on": ["failed"]}],
                "tokens": [{"id": TOKEN_ID, "name": f"令牌{EVIL}", "scope": "viewer",
                            "pool": None, "created_at": "2026-12-02T11:00:00Z",
                            "last_used_at": None, "revoked_at": None, "state": "live"}],
                "signins": [{"at": "2026-12-02T11:00:00Z", "client": EVIL, "ok": False,
                             "token_name": None}]}

    def token_create(self, name: str, scope: str) -> dict[str, Any]:
        self.calls.append(("token_create", (name, scope)))
        return {"id": TOKEN_ID, "name": name, "scope": scope, "token": "ql3_" + "s" * 43}

    def token_get(self, token_id: str) -> dict[str, Any]:
        return self.settings()["tokens"][0]

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        self.calls.append(("token_revoke", token_id))
        return {"id": token_id, "revoked": True}

    def notify_test(self) -> dict[str, Any]:
        self.calls.append(("notify_test", None))
        return {"configured": True, "deliveries": [{"channel": "json://x/…", "ok": True}]}


@pytest.fixture
def backend() -> SettingsBackend:
    return SettingsBackend()


def _client(backend: SettingsBackend, token: str) -> tuple[TestClient, str]:
    panel = create_app(backend, AdminTokenStore())  # type: ignore[arg-type]
    client = TestClient(Starlette(routes=[Mount("/ui", panel)]), base_url=BASE,
                        headers={"Origin": BASE, "Accept-Language": "en"})
    signed = client.post("/ui/signin", data={"token": token}, follow_redirects=False)
    assert signed.status_code == 303
    page = client.get("/ui/settings")
    assert page.status_code == 200
    csrf = page.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
    return client, csrf


def test_admin_page_escapes_every_value_and_shows_a_new_token_once(
        backend: SettingsBackend) -> None:
    client, csrf = _client(backend, "ql3_admin")
    page = client.get("/ui/settings").text
    assert EVIL not in page and "&lt;script&gt;" in page
    assert f'href="/ui/settings/tokens/{TOKEN_ID}/revoke"' in page
    issued = client.post("/ui/settings/tokens", data={"csrf": csrf, "name": "运维",
                                                      "scope": "operator"})
    assert issued.status_code == 200 and "ql3_" + "s" * 43 in issued.text
    assert issued.headers["cache-control"] == "no-store"
    assert "ql3_" + "s" * 43 not in client.get("/ui/settings").text
    assert backend.calls == [("token_create", ("运维", "operator"))]
    confirm = client.get(f"/ui/settings/tokens/{TOKEN_ID}/revoke")
    assert confirm.status_code == 200 and 'id="revoke-confirm"' in confirm.text
    assert backend.calls == [("token_create", ("运维", "operator"))]  # asking changes nothing
    done = client.post(f"/ui/settings/tokens/{TOKEN_ID}/revoke", data={"csrf": csrf},
                       follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui/settings?revoked=1"
    assert backend.calls[-1] == ("token_revoke", TOKEN_ID)


@pytest.mark.parametrize("token", ["ql3_operator", "ql3_viewer"])
def test_non_admin_writes_are_403_before_the_backend(backend: SettingsBackend,
                                                      token: str) -> None:
    client, csrf = _client(backend, token)
    page = client.get("/ui/settings").text
    assert 'action="/ui/settings/tokens"' not in page and "/revoke" not in page
    for path, form in (("/ui/settings/tokens", {"name": "x", "scope": "admin"}),
                       (f"/ui/settings/tokens/{TOKEN_ID}/revoke", {}),
                       ("/ui/settings/notify/test", {})):
        assert client.post(path, data={"csrf": csrf, **form}).status_code == 403, path
    assert client.get(f"/ui/settings/tokens/{TOKEN_ID}/revoke").status_code == 403
    assert backend.calls == []


def test_a_create_without_origin_is_refused(backend: SettingsBackend) -> None:
    client, csrf = _client(backend, "ql3_admin")
    reply = client.post("/ui/settings/tokens", data={"csrf": csrf, "name": "x",
                                                     "scope": "viewer"},
                        headers={"Origin": "http://evil.example"})
    assert reply.status_code == 403 and backend.calls == []


class RefusingBackend(SettingsBackend):
    """A token lookup or revoke refused with ``code`` (None: the owner is down)."""

    def __init__(self, code: str | None) -> None:
        super().__init__()
        self.code = code

    def _refuse(self) -> None:
        if self.code is None:
            raise BackendUnavailableError("owner down")
        raise BackendRefusedError(self.code, "refused")

    def token_get(self, token_id: str) -> dict[str, Any]:
        self._refuse()
        raise AssertionError("unreachable")

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        self.calls.append(("token_revoke", token_id))
        self._refuse()
        raise AssertionError("unreachable")


@pytest.mark.parametrize(("code", "status"), [("token_not_found", 404), ("forbidden", 403),
                                              (None, 503)])
def test_a_refused_or_unanswered_token_page_answers_its_status(code: str | None,
                                                                status: int) -> None:
    """An unknown token's revoke page and revoke are 404, a scope the owner refuses 403, an
    owner that does not answer 503; none shows the backend's message."""
    client, csrf = _client(RefusingBackend(code), "ql3_admin")
    confirm = client.get(f"/ui/settings/tokens/{TOKEN_ID}/revoke")
    done = client.post(f"/ui/settings/tokens/{TOKEN_ID}/revoke", data={"csrf": csrf},
                       follow_redirects=False)
    assert (confirm.status_code, done.status_code) == (status, status)
    assert "refused" not in confirm.text and "owner down" not in done.text
