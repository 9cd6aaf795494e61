"""Validated HEAD and conditional delete over real HTTP (ADR-0379 §3; cases C09, C10).

boto3 -> fault_proxy.py (our process) -> moto server (subprocess).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from artifacts import upload
from s3_services import CREDS, FaultProxy

from qinglong.control.retention.objects import (
    ArtifactIdentity,
    ArtifactIntegrityMismatchError,
    ArtifactUnavailableError,
    ObjectStoreUnsafeError,
    S3ObjectStore,
    TransactionHeldError,
    make_client,
)
from qinglong.control.retention.probe import ProbeVerdict

pytestmark = pytest.mark.integration

SAFE = ProbeVerdict("safe", "test: honours If-Match", "-", True)
UNSAFE = ProbeVerdict("unsafe", "test: ignores If-Match", "-", True)
BODY = b"line 1\nline 2\n"


def store(client: Any, verdict: ProbeVerdict | None = SAFE) -> S3ObjectStore:
    return S3ObjectStore(client, in_transaction=lambda: False, verdict=verdict)


@pytest.mark.parametrize("versioned", [False, True])
def test_head_present_keeps_etag_and_version(s3: Any, make_bucket: Callable[[bool], str],
                                             versioned: bool) -> None:
    ident = upload(s3, make_bucket(versioned), BODY)
    assert (ident.version_id is not None) is versioned
    head = store(s3).head(ident)
    assert head.state == "present"
    assert head.etag and head.etag.startswith('"')
    assert head.version_id == ident.version_id


def _changed(ident: ArtifactIdentity, field: str) -> ArtifactIdentity:
    if field in ("project", "run", "attempt", "artifact"):
        return dataclasses.replace(ident, metadata={**ident.metadata, field: "other"})
    if field == "sha256":
        return dataclasses.replace(ident, sha256="0" * 64)
    if field == "size":
        return dataclasses.replace(ident, size=ident.size + 1)
    return dataclasses.replace(ident, content_type="application/octet-stream")


@pytest.mark.parametrize(("field", "reason"), [
    ("content_type", "content_type"), ("size", "content_length"),
    ("sha256", "metadata.ql3-sha256"), ("project", "metadata.ql3-project"),
    ("run", "metadata.ql3-run"), ("attempt", "metadata.ql3-attempt"),
    ("artifact", "metadata.ql3-artifact")])
def test_head_rejects_each_identity_field(s3: Any, make_bucket: Callable[[bool], str],
                                          field: str, reason: str) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    with pytest.raises(ArtifactIntegrityMismatchError) as err:
        store(s3).head(_changed(ident, field))
    assert err.value.failure_class == "artifact_integrity_mismatch"
    assert reason in err.value.reason


def test_head_rejects_object_without_our_metadata(s3: Any,
                                                  make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    s3.put_object(Bucket=ident.bucket, Key=ident.key, Body=BODY, ContentType=ident.content_type)
    with pytest.raises(ArtifactIntegrityMismatchError, match="metadata"):
        store(s3).head(ident)


def test_head_checks_a_returned_server_checksum(s3: Any,
                                               make_bucket: Callable[[bool], str]) -> None:
    bucket = make_bucket(False)
    good = upload(s3, bucket, BODY)
    raw = s3.head_object(Bucket=bucket, Key=good.key, ChecksumMode="ENABLED")
    if not raw.get("ChecksumSHA256"):
        pytest.skip("server returns no SHA-256 checksum: nothing to compare")
    assert store(s3).head(good).state == "present"
    # Our metadata describes other bytes of the same length: only the server checksum sees it.
    corrupt = upload(s3, bucket, BODY, describes=BODY.upper())
    with pytest.raises(ArtifactIntegrityMismatchError, match="server_checksum_sha256"):
        store(s3).head(corrupt)
    lenient = S3ObjectStore(s3, in_transaction=lambda: False, server_checksum=False)
    assert lenient.head(corrupt).state == "present"


@pytest.mark.parametrize("versioned", [False, True])
def test_head_absent(s3: Any, make_bucket: Callable[[bool], str], versioned: bool) -> None:
    ident = upload(s3, make_bucket(versioned), BODY)
    if versioned:
        s3.delete_object(Bucket=ident.bucket, Key=ident.key, VersionId=ident.version_id)
    else:
        s3.delete_object(Bucket=ident.bucket, Key=ident.key)
    assert store(s3).head(ident).state == "absent"


def test_head_on_5xx_and_network_is_unavailable(s3: Any, proxy: FaultProxy,
                                               make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    proxy.set(fail={"HEAD": 503})
    with pytest.raises(ArtifactUnavailableError, match="503"):
        store(s3).head(ident)
    proxy.set(latency_ms=800)
    slow = make_client(proxy.endpoint, timeout_s=0.3, **CREDS)
    with pytest.raises(ArtifactUnavailableError, match="Timeout"):
        store(slow).head(ident)
    proxy.stop()
    with pytest.raises(ArtifactUnavailableError, match="HEAD failed"):
        store(s3).head(ident)


def test_unversioned_delete_sends_if_match_only(s3: Any, proxy: FaultProxy,
                                               make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    st = store(s3)
    head = st.head(ident)
    assert st.delete(ident, head.etag).outcome == "deleted"
    [entry] = proxy.deletes()
    assert entry["if_match"] == head.etag and entry["version"] is None
    assert entry["status"] == 204
    assert st.head(ident).state == "absent"


def test_versioned_delete_sends_exact_version_only(s3: Any, proxy: FaultProxy,
                                                   make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(True), BODY)
    st = store(s3, verdict=None)  # exact-version deletes need no probe verdict
    head = st.head(ident)
    assert st.delete(ident, head.etag).outcome == "deleted"
    [entry] = proxy.deletes()
    assert entry["version"] == ident.version_id and entry["if_match"] is None
    assert st.head(ident).state == "absent"


def test_c10_reupload_unversioned_fails_closed(s3: Any, direct_s3: Any, proxy: FaultProxy,
                                               make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    st = store(s3)
    head = st.head(ident)
    newer = upload(direct_s3, ident.bucket, b"a newer log\n", key=ident.key)
    with pytest.raises(ArtifactIntegrityMismatchError, match="412"):
        st.delete(ident, head.etag)
    assert [e["status"] for e in proxy.deletes()] == [412]
    assert st.head(newer).state == "present"


def test_c10_reupload_versioned_leaves_new_version(s3: Any, direct_s3: Any, proxy: FaultProxy,
                                                  make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(True), BODY)
    st = store(s3)
    head = st.head(ident)
    newer = upload(direct_s3, ident.bucket, b"a newer log\n", key=ident.key)
    assert newer.version_id != ident.version_id
    assert st.delete(ident, head.etag).outcome == "deleted"
    assert [e["version"] for e in proxy.deletes()] == [ident.version_id]
    assert st.head(ident).state == "absent"
    assert st.head(newer).state == "present"
    assert direct_s3.get_object(Bucket=ident.bucket, Key=ident.key)["Body"].read() == (
        b"a newer log\n")


@pytest.mark.parametrize("versioned", [False, True])
def test_c09_dropped_delete_response_then_head_absent(
        s3: Any, proxy: FaultProxy, make_bucket: Callable[[bool], str], versioned: bool) -> None:
    ident = upload(s3, make_bucket(versioned), BODY)
    st = store(s3)
    head = st.head(ident)
    proxy.set(drop_delete_response=True)
    with pytest.raises(ArtifactUnavailableError):
        st.delete(ident, head.etag)
    [entry] = proxy.deletes()
    assert entry["dropped"] and entry["status"] == 204  # the server did delete
    proxy.set()
    # The next claim (after the lease expires) settles from S3 facts: already_absent.
    assert st.head(ident).state == "absent"
    assert len(proxy.deletes()) == 1  # no SDK retry sent a second DELETE


def test_conditional_delete_404_is_settled_by_head(s3: Any, direct_s3: Any,
                                                   make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    st = store(s3)
    head = st.head(ident)
    direct_s3.delete_object(Bucket=ident.bucket, Key=ident.key)
    assert st.delete(ident, head.etag).outcome == "already_absent"


def test_delete_5xx_is_unavailable(s3: Any, proxy: FaultProxy,
                                   make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    st = store(s3)
    head = st.head(ident)
    proxy.set(fail={"DELETE": 503})
    with pytest.raises(ArtifactUnavailableError, match="503"):
        st.delete(ident, head.etag)
    proxy.set()
    assert st.head(ident).state == "present"


@pytest.mark.parametrize("verdict", [None, UNSAFE])
def test_unsafe_backend_refuses_unversioned_keeps_versioned(
        s3: Any, proxy: FaultProxy, make_bucket: Callable[[bool], str],
        verdict: ProbeVerdict | None) -> None:
    plain = upload(s3, make_bucket(False), BODY)
    versioned = upload(s3, make_bucket(True), BODY)
    st = store(s3, verdict)
    with pytest.raises(ObjectStoreUnsafeError) as err:
        st.delete(plain, st.head(plain).etag)
    assert err.value.failure_class == "object_store_unsafe"
    assert proxy.deletes() == []
    assert st.head(plain).state == "present"
    assert st.delete(versioned, None).outcome == "deleted"
    assert [e["version"] for e in proxy.deletes()] == [versioned.version_id]


def test_guard_refuses_every_call_inside_a_transaction(s3: Any, proxy: FaultProxy,
                                                       make_bucket: Callable[[bool], str]) -> None:
    plain = upload(s3, make_bucket(False), BODY)
    versioned = upload(s3, make_bucket(True), BODY)
    etag = store(s3).head(plain).etag
    inside = [True]
    st = S3ObjectStore(s3, in_transaction=lambda: inside[0], verdict=SAFE)
    for call in (lambda: st.head(plain), lambda: st.delete(plain, etag),
                 lambda: st.delete(versioned, None)):
        with pytest.raises(TransactionHeldError):
            call()
    assert proxy.deletes() == []
    inside[0] = False
    assert st.delete(plain, etag).outcome == "deleted"


def test_an_unversioned_record_in_a_bucket_versioned_later_is_never_called_retired(
        s3: Any, direct_s3: Any, make_bucket: Callable[[bool], str]) -> None:
    """DELETE only adds a delete marker there: the bytes stay as the "null" version. Neither
    that DELETE nor a later HEAD (404 behind the marker) may read as deleted/absent."""
    bucket = make_bucket(False)
    ident = upload(s3, bucket, BODY)
    direct_s3.put_bucket_versioning(Bucket=bucket,
                                    VersioningConfiguration={"Status": "Enabled"})
    st = store(s3)
    head = st.head(ident)
    with pytest.raises(ObjectStoreUnsafeError, match="delete marker"):
        st.delete(ident, head.etag)
    with pytest.raises(ObjectStoreUnsafeError, match="delete marker hides"):
        st.head(ident)
    versions = direct_s3.list_object_versions(Bucket=bucket)
    assert [v["VersionId"] for v in versions["Versions"]] == ["null"]  # the bytes remain


def test_a_404_from_a_missing_bucket_is_unavailable_not_absent(
        s3: Any, make_bucket: Callable[[bool], str]) -> None:
    ident = upload(s3, make_bucket(False), BODY)
    gone = dataclasses.replace(ident, bucket="ql3-no-such-bucket-zz")
    with pytest.raises(ArtifactUnavailableError, match="HeadBucket answered 404"):
        store(s3).head(gone)


def test_a_null_version_id_is_not_an_identity() -> None:
    with pytest.raises(ValueError, match="not null"):
        ArtifactIdentity(bucket="b", key="k", version_id="null", content_type="text/plain",
                         size=1, sha256="0" * 64,
                         metadata={"project": "p", "run": "r", "attempt": "a",
                                   "artifact": "x"})
