"""Backend capability probe over real HTTP (docs/protocols.md §4.3, case C08)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from s3_services import FaultProxy

from qinglong.control.retention.objects import TransactionHeldError
from qinglong.control.retention.probe import CANARY_PREFIX, probe_conditional_delete

pytestmark = pytest.mark.integration


def _leftovers(client: Any, bucket: str) -> list[str]:
    resp = client.list_object_versions(Bucket=bucket, Prefix=CANARY_PREFIX)
    return [v["Key"] for v in resp.get("Versions", []) + resp.get("DeleteMarkers", [])]


def _probe(client: Any, bucket: str) -> Any:
    return probe_conditional_delete(client, bucket, in_transaction=lambda: False)


@pytest.mark.parametrize("versioned", [False, True])
def test_probe_passes_against_plain_moto(s3: Any, proxy: FaultProxy,
                                         make_bucket: Callable[[bool], str],
                                         versioned: bool) -> None:
    bucket = make_bucket(versioned)
    verdict = _probe(s3, bucket)
    assert verdict.status == "safe", verdict.reason
    assert verdict.allows_unversioned_delete
    assert verdict.degraded == () and verdict.readiness_reason is None
    assert verdict.canary_removed and _leftovers(s3, bucket) == []
    wrong = proxy.deletes()[0]
    assert wrong["if_match"] and wrong["forwarded_if_match"] == wrong["if_match"]
    assert wrong["status"] == 412


@pytest.mark.parametrize("versioned", [False, True])
def test_c08_probe_detects_a_backend_that_ignores_if_match(
        s3: Any, proxy: FaultProxy, make_bucket: Callable[[bool], str], versioned: bool) -> None:
    bucket = make_bucket(versioned)
    proxy.set(strip_if_match=True)
    verdict = _probe(s3, bucket)
    assert verdict.status == "unsafe"
    assert not verdict.allows_unversioned_delete
    assert verdict.degraded == ("object_store_unsafe",)
    assert verdict.readiness_reason is None  # degraded, still ready (docs/protocols.md §4.1)
    assert verdict.canary_removed and _leftovers(s3, bucket) == []
    first = proxy.deletes()[0]
    assert first["if_match"] and first["forwarded_if_match"] is None


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_probe_unavailable_on_5xx(s3: Any, proxy: FaultProxy,
                                  make_bucket: Callable[[bool], str], method: str) -> None:
    bucket = make_bucket(False)
    proxy.set(fail={method: 503})
    verdict = _probe(s3, bucket)
    assert verdict.status == "unavailable"
    assert verdict.readiness_reason == "object_store_unavailable"
    assert not verdict.allows_unversioned_delete
    proxy.set()
    if method == "DELETE":
        assert not verdict.canary_removed
        s3.delete_object(Bucket=bucket, Key=verdict.canary_key)


def test_probe_refuses_inside_a_transaction(s3: Any, proxy: FaultProxy,
                                            make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    with pytest.raises(TransactionHeldError):
        probe_conditional_delete(s3, bucket, in_transaction=lambda: True)
    assert _leftovers(s3, bucket) == [] and proxy.deletes() == []
