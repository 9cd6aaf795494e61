"""Bad input on every route of the real API over HTTP (docs/protocols.md §4.5 "Input
bounds"): the bounded JSON decoder answers each class with a 4xx and its own code, and no
route answers 5xx to any body we can make up (only a route's documented 503 is allowed, such
as the bundle store's: this world configures no bucket)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

from qinglong.control.api.app import build_app
from qinglong.control.api.context import ApiContext

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
DEEP = b"[" * 5000 + b"]" * 5000
CLASSES = [
    (DEEP, 400, "json_too_deep"),
    (b'{"name": "' + "签到".encode("gbk") + b'"}', 400, "json_not_utf8"),
    (b'{"name": "a", "timeout_ms": ' + b"9" * 5000 + b"}", 400, "json_number_too_long"),
    (b'{"pad": "' + b"x" * (9 * 1024 * 1024) + b'"}', 413, "body_too_large"),
]


@pytest.mark.parametrize(("body", "status", "code"), CLASSES,
                         ids=[c[2] for c in CLASSES])
@pytest.mark.parametrize(("path", "scope"), [("/v1/tasks", "operator"),
                                              ("/v1/worker/claim", "worker")])
def test_each_class_of_bad_json_gets_its_own_4xx(api: Any, path: str, scope: str,
                                                  body: bytes, status: int, code: str) -> None:
    answer = api.client.post(path, content=body, headers={
        "Content-Type": "application/json", **api.as_(scope)})
    assert (answer.status_code, answer.json()["error"]["code"]) == (status, code), answer.text
    assert "Traceback" not in answer.text and "签到" not in answer.text


def _concrete(path: str, value: str) -> str:
    return re.sub(r"\{[^}]+\}", value, path)


def _routes() -> list[tuple[str, str]]:
    """(method, path template) of every route the application serves."""
    app = build_app(ApiContext(engine=None, project_id="routes-only"))  # type: ignore[arg-type]
    found: set[tuple[str, str]] = set()
    pending = list(app.routes)
    while pending:
        route = pending.pop()
        inner = getattr(route, "original_router", None)  # FastAPI ≥ 0.16x includes lazily
        if inner is not None:
            pending.extend(inner.routes)
        elif isinstance(route, Route) and route.methods:
            found.update((m, route.path) for m in route.methods if m != "HEAD")
    assert len(found) > 30  # every operation of the API
    return sorted(found)


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
DEPTHS = st.sampled_from([2, 40, 1500, 5000])
BODIES = st.one_of(
    st.binary(max_size=64),
    JSONISH.map(lambda v: json.dumps(v).encode()),
    DEPTHS.map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    DEPTHS.map(lambda n: b"[" * n + b"]" * n),
    st.sampled_from([10, 100, 5000]).map(lambda n: b'{"max_attempts": ' + b"9" * n + b"}"),
    st.sampled_from([b"\xff\xfe", b'"\\ud800"', b"NaN", b"[1e999999]", b"-", b"",
                     '{"name": "签到"}'.encode("gbk")]),
)
PARAMS = st.sampled_from(["x", "0", "00000000-0000-0000-0000-000000000000", "a" * 64,
                          "%FF", "..", "签到"])


@pytest.mark.parametrize(("method", "template"), _routes())
def test_no_route_answers_5xx_to_any_body(api: Any, method: str, template: str) -> None:
    operation = api.app.openapi()["paths"].get(template, {}).get(method.lower(), {})
    documented_503 = "503" in operation.get("responses", {})
    @settings(max_examples=15, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(param=PARAMS, body=BODIES,
           scope=st.just("worker") if template.startswith("/v1/worker/")
           else st.sampled_from(["viewer", "operator", "admin"]),
           media=st.sampled_from(["application/json", "application/gzip", "text/plain"]))
    def check(param: str, body: bytes, scope: str, media: str) -> None:
        answer = api.client.request(method, _concrete(template, param), content=body,
                                    headers={"Content-Type": media, **api.as_(scope)})
        if answer.status_code == 503 and documented_503:  # e.g. no bucket in this world
            return
        assert answer.status_code < 500, (method, template, answer.status_code, answer.text)
        assert "Traceback" not in answer.text

    check()


@pytest.mark.parametrize(("path", "scope", "body"), [
    ("/v1/vars/JD_COOKIE", "operator", '{"value": "\\ud800abcdef"}'),
    ("/v1/vars/JD_COOKIE", "operator", '{"value": "ok-value", "remark": "a\\u0000b"}'),
    ("/v1/notify/channels", "admin", '{"url": "bark://h/\\u0000k"}'),
    ("/v1/notify/channels", "admin", '{"url": "bark://h/\\udc80k"}'),
], ids=["var-lone-surrogate", "var-remark-nul", "channel-nul", "channel-lone-surrogate"])
def test_text_postgresql_cannot_store_is_a_422_not_a_500(api: Any, path: str, scope: str,
                                                         body: str) -> None:
    """A lone surrogate or a NUL in a variable's value or remark, or in a channel URL (valid
    JSON escapes): refused as ``invalid_request`` naming the field, never a 5xx, and the
    answer never carries the value."""
    answer = api.client.post(path, content=body.encode(), headers={
        "Content-Type": "application/json", **api.as_(scope)})
    assert answer.status_code == 422, answer.text
    assert "abcdef" not in answer.text and "bark://" not in answer.text


@pytest.mark.parametrize("query", ["q=a%00b", "label=k%3Dv%00", "cursor=%00"])
def test_a_nul_in_the_task_list_query_is_a_422_not_a_500(api: Any, query: str) -> None:
    """``GET /v1/tasks?q=`` / ``label=`` / ``cursor=`` with a NUL (found by the OpenAPI
    fuzz): 422 ``invalid_request``, never a 500 from PostgreSQL."""
    answer = api.client.get(f"/v1/tasks?{query}", headers=api.as_("viewer"))
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_request"


@pytest.mark.parametrize("name", ["PATH", "LD_PRELOAD", "LD_AUDIT", "QL3_WORKER_TOKEN"])
def test_a_variable_named_as_the_runtime_or_the_loader_is_a_422_and_nothing_is_stored(
        api: Any, name: str) -> None:
    """``PATH``, ``LD_*`` and ``QL3_*`` are no global variable's (one rule with ``ql3
    local vars set``: ``shared/variable_limits.check_settable_name``); the answer says why,
    never echoes the value, and a name users set themselves still goes in."""
    answer = api.client.post(f"/v1/vars/{name}", json={"value": "x-secret-value"},
                             headers=api.as_("operator"))
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_variable" and name in error["message"]
    assert "cannot be a global variable" in error["message"]
    assert "x-secret-value" not in answer.text
    if name == "PATH":
        assert "--env PATH=" in error["message"]
    listed = api.client.get("/v1/vars", headers=api.as_("operator")).json()
    assert name not in [v["name"] for v in listed]
    ok = api.client.post("/v1/vars/NODE_OPTIONS", json={"value": "--max-old-space-size=64"},
                         headers=api.as_("operator"))
    assert ok.status_code == 200, ok.text
