"""Bad input on every route of the real API over HTTP (docs/protocols.md §4.5 "Input
bounds"): the bounded JSON decoder answers each class with a 4xx and its own code, and no
route answers 5xx to any body we can make up (the database is up: 503 is not expected)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.routing import Route

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


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)
BODIES = st.one_of(
    st.binary(max_size=64),
    JSONISH.map(lambda v: __import__("json").dumps(v).encode()),
    st.integers(1, 3000).map(lambda n: b"{" + b'"a":{' * n + b"}" * n + b"}"),
    st.integers(1, 3000).map(lambda n: b"9" * n),
    st.sampled_from([b"\xff\xfe", b'"\\ud800"', b"NaN", b"[1e999999]", b"-"]),
)
PARAMS = st.sampled_from(["x", "0", "00000000-0000-0000-0000-000000000000", "a" * 64,
                          "%FF", "..", "签到"])


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_route_answers_5xx_to_any_body(api: Any, data: st.DataObject) -> None:
    routes = [r for r in api.app.routes if isinstance(r, Route) and r.methods]
    route = data.draw(st.sampled_from(routes))
    method = data.draw(st.sampled_from(sorted(route.methods)))
    path = _concrete(route.path, data.draw(PARAMS))
    body = data.draw(BODIES)
    scope = data.draw(st.sampled_from(["viewer", "operator", "admin", "worker"]))
    media = data.draw(st.sampled_from(["application/json", "application/gzip", "text/plain"]))
    answer = api.client.request(method, path, content=body,
                                headers={"Content-Type": media, **api.as_(scope)})
    assert answer.status_code < 500, (method, route.path, answer.status_code, answer.text)
