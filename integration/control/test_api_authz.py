"""The authorization matrix (docs/protocols.md §4.5; issue 11 item 7): every principal against every
route of ``app.routes``. A route without an entry in ``REQUIRED`` fails the test, so a new
route cannot ship without a decision on who may call it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from api_world import ApiWorld
from fastapi.routing import APIRoute

from qinglong.shared.ids import uuid7

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

PUBLIC = None
REQUIRED: dict[tuple[str, str], str | None] = {
    ("GET", "/livez"): PUBLIC, ("GET", "/readyz"): PUBLIC, ("GET", "/metrics"): PUBLIC,
    ("GET", "/v1/tasks"): "viewer", ("GET", "/v1/tasks/{name}"): "viewer",
    ("GET", "/v1/tasks/{name}/occurrences"): "viewer",
    ("POST", "/v1/tasks"): "admin", ("PATCH", "/v1/tasks/{name}"): "admin",
    ("DELETE", "/v1/tasks/{name}"): "admin",
    ("POST", "/v1/tasks/{name}/run"): "operator", ("POST", "/v1/tasks/{name}/enable"): "operator",
    ("POST", "/v1/tasks/{name}/disable"): "operator",
    ("GET", "/v1/runs"): "viewer", ("GET", "/v1/runs/{run_id}"): "viewer",
    ("GET", "/v1/runs/resolve"): "viewer", ("GET", "/v1/workers"): "viewer",
    ("POST", "/v1/runs/{run_id}/cancel"): "operator",
    ("GET", "/v1/attempts/{attempt_id}"): "viewer",
    ("GET", "/v1/attempts/{attempt_id}/log"): "viewer",
    ("GET", "/v1/tokens"): "admin", ("POST", "/v1/tokens"): "admin",
    ("POST", "/v1/tokens/{token_id}/revoke"): "admin",
    ("GET", "/v1/scripts"): "viewer", ("GET", "/v1/scripts/{digest}"): "viewer",
    ("POST", "/v1/scripts"): "operator", ("DELETE", "/v1/scripts/{digest}"): "operator",
    ("GET", "/v1/vars"): "viewer", ("POST", "/v1/vars/{name}"): "operator",
    ("POST", "/v1/vars/{name}/enable"): "operator",
    ("POST", "/v1/vars/{name}/disable"): "operator", ("DELETE", "/v1/vars/{name}"): "operator",
    ("GET", "/v1/vars/export"): "viewer", ("POST", "/v1/vars/{name}/pools"): "operator",
    ("GET", "/v1/notify/channels"): "admin", ("POST", "/v1/notify/channels"): "admin",
    ("DELETE", "/v1/notify/channels/{channel_id}"): "admin", ("POST", "/v1/notify/test"): "admin",
}
RANK = {"viewer": 1, "operator": 2, "admin": 3}


def required(method: str, path: str) -> str | None:
    if path.startswith("/v1/worker/"):
        return "worker"  # every worker endpoint: worker tokens only
    assert (method, path) in REQUIRED, f"no authorization entry for {method} {path}"
    return REQUIRED[(method, path)]


def api_routes(routes: list[Any], prefix: str = "") -> list[tuple[str, str]]:
    """(method, path) of every APIRoute under ``routes``, through included routers (FastAPI
    keeps ``include_router`` results as lazy ``_IncludedRouter`` entries)."""
    found: list[tuple[str, str]] = []
    for route in routes:
        if isinstance(route, APIRoute):
            found += [(m, prefix + route.path) for m in sorted(route.methods)]
        elif hasattr(route, "original_router"):
            context = getattr(route, "include_context", None)
            found += api_routes(route.original_router.routes,
                                prefix + (getattr(context, "prefix", "") or ""))
    return found


def allowed(scope: str, needed: str) -> bool:
    if "worker" in (scope, needed):
        return scope == needed
    return RANK[scope] >= RANK[needed]


def test_every_principal_against_every_route(api: ApiWorld) -> None:
    principals = {
        "none": None, "malformed": "Bearer not-a-token", "basic": "Basic dXNlcjpwYXNz",
        "unknown": "Bearer ql3_" + "A" * 43,
        "revoked": f"Bearer {api.issue('admin', revoked=True)}",
        **{scope: f"Bearer {api.tokens[scope]}" for scope in RANK | {"worker": 0}},
    }
    routes = api_routes(api.app.routes)
    documented = {(m.upper(), p) for p, ops in api.app.openapi()["paths"].items() for m in ops}
    assert set(routes) == documented and len(routes) >= len(REQUIRED)
    failures = []
    for method, path in routes:
        needed = required(method, path)
        url = re.sub(r"\{name\}", "backup", re.sub(r"\{\w+_id\}", uuid7(), path))
        url = url.replace("{digest}", "ab" * 32)
        for who, header in principals.items():
            headers = {"Authorization": header} if header else {}
            body = {} if method in ("POST", "PATCH") else None
            status = api.client.request(method, url, headers=headers, json=body).status_code
            if needed is None:
                ok = status not in (401, 403)
            elif who in RANK or who == "worker":
                ok = status == 403 if not allowed(who, needed) else status not in (401, 403)
            else:
                ok = status == 401
            if not ok or (status >= 500 and status != 503):
                failures.append((method, path, who, status))
    assert failures == []


def test_a_revoked_token_is_refused_at_its_next_request(api: ApiWorld) -> None:
    token = api.issue("viewer")
    headers = {"Authorization": f"Bearer {token}"}
    assert api.client.get("/v1/tasks", headers=headers).status_code == 200
    listed = api.client.get("/v1/tokens", headers=api.as_("admin")).json()
    assert token not in str(listed)
    token_id = listed[-1]["id"]
    revoked = api.client.post(f"/v1/tokens/{token_id}/revoke", headers=api.as_("admin"))
    assert revoked.status_code == 200 and revoked.json()["revoked_at"]
    refused = api.client.get("/v1/tasks", headers=headers)
    assert (refused.status_code, refused.json()["error"]["code"]) == (401, "unauthenticated")


def test_a_token_whose_revocation_is_scheduled_works_until_then(api: ApiWorld) -> None:
    """A revocation ahead of now by the database clock (a rotation's overlap) leaves the
    token valid until it comes, then refused; the API's revoke of such a token is
    immediate. ``GET /v1/tokens`` shows the time and that it is pending."""
    token = api.issue("viewer")
    headers = {"Authorization": f"Bearer {token}"}
    token_id = api.client.get("/v1/tokens", headers=api.as_("admin")).json()[-1]["id"]
    api.sql("UPDATE api_tokens SET revoked_at = now() + interval '1 hour' WHERE id = %(id)s",
            {"id": token_id})
    assert api.client.get("/v1/tasks", headers=headers).status_code == 200
    (row,) = [t for t in api.client.get("/v1/tokens", headers=api.as_("admin")).json()
              if t["id"] == token_id]
    assert row["revoked_at"] and row["revocation_pending"] is True
    revoked = api.client.post(f"/v1/tokens/{token_id}/revoke", headers=api.as_("admin"))
    assert revoked.status_code == 200 and revoked.json()["revocation_pending"] is False
    assert api.client.get("/v1/tasks", headers=headers).status_code == 401
    other = api.issue("viewer")
    api.sql("UPDATE api_tokens SET revoked_at = now() - interval '1 second'"
            " WHERE token_sha256 = encode(sha256(%(t)s::bytea), 'hex')", {"t": other})
    assert api.client.get("/v1/tasks", headers={"Authorization": f"Bearer {other}"}
                          ).status_code == 401


def test_an_issued_token_is_answered_once_and_works(api: ApiWorld) -> None:
    issued = api.client.post("/v1/tokens", json={"name": "ci", "scope": "operator"},
                             headers=api.as_("admin"))
    assert issued.status_code == 201
    token = issued.json()["token"]
    assert api.client.get("/v1/runs", headers={"Authorization": f"Bearer {token}"}
                          ).status_code == 200
    assert token not in api.client.get("/v1/tokens", headers=api.as_("admin")).text
    worker = api.client.post("/v1/tokens", json={"name": "w", "scope": "worker",
                                                 "pool": "no-such-pool"},
                             headers=api.as_("admin"))
    assert (worker.status_code, worker.json()["error"]["code"]) == (404, "pool_not_found")
