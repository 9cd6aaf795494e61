"""The S3 tier's behaviours against a real MinIO (testcontainers; docs/protocols.md §4.3, C08–C10).

boto3 -> fault_proxy.py (our process) -> MinIO (container). MinIO is known to ignore
``If-Match`` on DeleteObject, but the expectations here follow whatever the probe says on this
server, so they hold for either verdict: ``unsafe`` → unversioned deletes are refused with
``object_store_unsafe`` and exact-VersionId deletes go on; ``safe`` → a stale ``If-Match`` is
refused with ``artifact_integrity_mismatch``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from artifacts import upload
from botocore.exceptions import ClientError
from s3_services import FaultProxy

from qinglong.control.retention.objects import (
    ArtifactIntegrityMismatchError,
    ObjectStoreUnsafeError,
    S3ObjectStore,
    http_status,
)
from qinglong.control.retention.probe import (
    CANARY_PREFIX,
    ProbeVerdict,
    probe_conditional_delete,
)

pytestmark = pytest.mark.integration

BODY = b"line 1\nline 2\n"
NEWER = b"a newer log\n"


def store(client: Any, verdict: ProbeVerdict | None) -> S3ObjectStore:
    return S3ObjectStore(client, in_transaction=lambda: False, verdict=verdict)


def _leftovers(client: Any, bucket: str) -> list[str]:
    resp = client.list_object_versions(Bucket=bucket, Prefix=CANARY_PREFIX)
    return [v["Key"] for v in resp.get("Versions", []) + resp.get("DeleteMarkers", [])]


@pytest.mark.parametrize("versioned", [False, True])
def test_head_present_keeps_etag_and_version(s3: Any, make_bucket: Callable[[bool], str],
                                             versioned: bool) -> None:
    ident = upload(s3, make_bucket(versioned), BODY)
    assert (ident.version_id is not None) is versioned
    head = store(s3, None).head(ident)
    assert head.state == "present"
    assert head.etag and head.etag.startswith('"')
    assert head.version_id == ident.version_id


def test_versioned_delete_retires_exactly_that_version(
        s3: Any, proxy: FaultProxy, make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(True), BODY)
    st = store(s3, None)  # exact-version deletes need no probe verdict
    head = st.head(ident)
    assert st.delete(ident, head.etag).outcome == "deleted"
    [entry] = proxy.deletes()
    assert entry["version"] == ident.version_id and entry["if_match"] is None
    assert st.head(ident).state == "absent"


def test_c10_reupload_versioned_leaves_new_version(
        s3: Any, direct_s3: Any, proxy: FaultProxy, make_bucket: Callable[[bool], str],
        minio_verdict: ProbeVerdict) -> None:
    ident = upload(s3, make_bucket(True), BODY)
    st = store(s3, minio_verdict)
    head = st.head(ident)
    newer = upload(direct_s3, ident.bucket, NEWER, key=ident.key)
    assert newer.version_id and newer.version_id != ident.version_id
    assert st.delete(ident, head.etag).outcome == "deleted"
    assert [e["version"] for e in proxy.deletes()] == [ident.version_id]
    assert st.head(ident).state == "absent"
    assert st.head(newer).state == "present"
    assert direct_s3.get_object(Bucket=ident.bucket, Key=ident.key)["Body"].read() == NEWER


def test_probe_gives_a_verdict_on_minio(minio_verdict: ProbeVerdict) -> None:
    print(f"MinIO probe verdict: {minio_verdict.status} ({minio_verdict.reason})")
    assert minio_verdict.status in ("safe", "unsafe"), minio_verdict.reason
    assert minio_verdict.readiness_reason is None
    assert minio_verdict.canary_removed
    if minio_verdict.status == "unsafe":
        assert not minio_verdict.allows_unversioned_delete
        assert minio_verdict.degraded == ("object_store_unsafe",)
    else:
        assert minio_verdict.allows_unversioned_delete
        assert minio_verdict.degraded == ()


@pytest.mark.parametrize("versioned", [False, True])
def test_probe_verdict_matches_raw_behaviour(
        s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str],
        minio_verdict: ProbeVerdict, versioned: bool) -> None:
    """Probe again (through the proxy, either bucket kind), then see for ourselves what a
    DELETE with a wrong ``If-Match`` does: the verdict must describe it."""
    bucket = make_bucket(versioned)
    verdict = probe_conditional_delete(s3, bucket, in_transaction=lambda: False)
    assert verdict.status == minio_verdict.status, verdict.reason
    assert verdict.canary_removed and _leftovers(direct_s3, bucket) == []
    ident = upload(direct_s3, make_bucket(False), BODY)
    status = _delete_with_wrong_if_match(direct_s3, ident.bucket, ident.key)
    assert status in (200, 204, 412, 501)
    still_there = store(direct_s3, None).head(ident).state == "present"
    honoured = status == 412 and still_there
    assert (minio_verdict.status == "safe") is honoured


def _delete_with_wrong_if_match(client: Any, bucket: str, key: str) -> int:
    """The HTTP status of an unversioned DELETE whose ``If-Match`` matches nothing."""
    try:
        resp = client.delete_object(Bucket=bucket, Key=key, IfMatch='"' + "0" * 32 + '"')
    except ClientError as exc:
        return http_status(exc)
    status: int = resp["ResponseMetadata"]["HTTPStatusCode"]
    return status


def test_unversioned_delete_follows_the_verdict(
        s3: Any, direct_s3: Any, proxy: FaultProxy, make_bucket: Callable[[bool], str],
        minio_verdict: ProbeVerdict) -> None:
    plain = upload(s3, make_bucket(False), BODY)
    versioned = upload(s3, make_bucket(True), BODY)
    st = store(s3, minio_verdict)
    head = st.head(plain)
    if not minio_verdict.allows_unversioned_delete:
        # MinIO ignores If-Match on DELETE: no unversioned delete is even sent.
        with pytest.raises(ObjectStoreUnsafeError) as unsafe:
            st.delete(plain, head.etag)
        assert unsafe.value.failure_class == "object_store_unsafe"
        assert proxy.deletes() == []
        assert st.head(plain).state == "present"
    else:
        # If-Match honoured: a re-upload under the same key makes the recorded ETag stale.
        newer = upload(direct_s3, plain.bucket, NEWER, key=plain.key)
        with pytest.raises(ArtifactIntegrityMismatchError) as stale:
            st.delete(plain, head.etag)
        assert stale.value.failure_class == "artifact_integrity_mismatch"
        assert [e["status"] for e in proxy.deletes()] == [412]
        assert st.head(newer).state == "present"
    # Either way, exact-VersionId deletes go on.
    before = len(proxy.deletes())
    assert st.delete(versioned, None).outcome == "deleted"
    assert [e["version"] for e in proxy.deletes()[before:]] == [versioned.version_id]
    assert st.head(versioned).state == "absent"
