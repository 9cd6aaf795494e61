"""Wire bounds that keep a well-formed message inside what control stores (issue 11 item 7:
no 5xx for valid input): a completion's exit code and signal fit a POSIX wait status (the
columns are ``integer``; a wider number used to reach PostgreSQL and answer 500), a log's
size fits one PUT and its content type is one HTTP header value."""

from __future__ import annotations

from typing import Any

import pytest

from qinglong.shared.wire import MAX_LOG_BYTES, CompletionReport, LogUploadRequest, WireFormatError

LEASE = {"attempt_id": "01a23028-f318-702c-af3a-669f40844db2",
         "lease_token": "7c9e6679-7425-40de-944b-e07fc1f90ae7", "lease_version": 1}
SHA = "0" * 64


def _completion(**fields: Any) -> dict[str, Any]:
    return {"lease": LEASE, "outcome": "failed", "exit_code": 1, "signal": None, "log": None,
            **fields}


@pytest.mark.parametrize(("field", "value"), [
    ("exit_code", 256), ("exit_code", -1), ("exit_code", 2**31), ("exit_code", 2**70),
    ("signal", 0), ("signal", 256), ("signal", -2**31 - 1)])
def test_a_completion_with_an_exit_code_or_signal_no_wait_status_holds_is_refused(
        field: str, value: int) -> None:
    with pytest.raises(WireFormatError) as caught:
        CompletionReport.from_json(_completion(**{field: value}))
    assert caught.value.field == field and str(value) not in str(caught.value)


@pytest.mark.parametrize(("exit_code", "signal"), [(0, None), (255, None), (None, 1),
                                                   (None, 255)])
def test_the_edges_of_a_wait_status_are_accepted(exit_code: int | None,
                                                 signal: int | None) -> None:
    report = CompletionReport.from_json(_completion(exit_code=exit_code, signal=signal))
    assert (report.exit_code, report.signal) == (exit_code, signal)


@pytest.mark.parametrize(("log", "field"), [
    ({"sha256": SHA, "size_bytes": MAX_LOG_BYTES + 1}, "size_bytes"),
    ({"sha256": SHA, "size_bytes": 2**63}, "size_bytes"),
    ({"sha256": SHA, "size_bytes": 3, "content_type": "text/plain\r\nX-Evil: 1"},
     "content_type"),
    ({"sha256": SHA, "size_bytes": 3, "content_type": "texte/\u00e9"}, "content_type"),
    ({"sha256": SHA, "size_bytes": 3, "content_type": ""}, "content_type")])
def test_log_facts_no_single_put_could_carry_are_refused(log: dict[str, Any],
                                                         field: str) -> None:
    with pytest.raises(WireFormatError) as caught:
        LogUploadRequest.from_json({"lease": LEASE, "log": log})
    assert caught.value.field == field


def test_the_largest_single_put_and_a_parameterized_content_type_are_accepted() -> None:
    request = LogUploadRequest.from_json({"lease": LEASE, "log": {
        "sha256": SHA, "size_bytes": MAX_LOG_BYTES,
        "content_type": "text/plain; charset=utf-8"}})
    assert request.log.size_bytes == MAX_LOG_BYTES


def _claimed(**fields: Any) -> dict[str, Any]:
    return {"lease": LEASE, "run_id": "01a23028-f318-702c-af3a-669f40844db3",
            "task_id": "01a23028-f318-702c-af3a-669f40844db4", "task_name": "t",
            "run_number": 1, "attempt_number": 1, "argv": None, "shell": None, "env": {},
            "cwd": None, "timeout_ms": None, "log_limit_bytes": 1, "lease_ms": 3000,
            "heartbeat_ms": 1000, **fields}


def test_a_bundle_attempt_may_have_no_command_but_names_its_entry_point() -> None:
    from qinglong.shared.wire import ClaimedAttempt

    ok = ClaimedAttempt.from_json(_claimed(bundle_digest=SHA, entry_point="bin/run.sh"))
    assert (ok.argv, ok.shell, ok.entry_point) == (None, None, "bin/run.sh")
    for broken in (_claimed(), _claimed(bundle_digest=SHA),
                   _claimed(argv=["a"], shell="b", bundle_digest=SHA, entry_point="r"),
                   *(_claimed(bundle_digest=SHA, entry_point=bad)
                     for bad in ("/etc/x", "../x", "a//b", "./a", "a\nb"))):
        with pytest.raises(WireFormatError):
            ClaimedAttempt.from_json(broken)


def test_a_bundle_grant_is_bounded_and_names_a_digest() -> None:
    from qinglong.shared.wire import BundleGrant

    good = {"digest": SHA, "url": "http://s3/b?sig", "size_bytes": 10, "expires_in_s": 60}
    assert BundleGrant.from_json(good).size_bytes == 10
    for key, value in (("digest", "x"), ("url", "file:///etc/passwd"), ("size_bytes", 0),
                       ("expires_in_s", 10**9)):
        with pytest.raises(WireFormatError):
            BundleGrant.from_json({**good, key: value})


def test_log_chunk_round_trips_and_refuses_a_bad_one() -> None:
    import base64

    from qinglong.shared import wire as w
    lease = {"attempt_id": "018f0000-0000-7000-8000-000000000001",
             "lease_token": "11111111-1111-4111-8111-111111111111", "lease_version": 1}
    data = base64.b64encode("京东签到 ok\n".encode()).decode()
    batch = w.LogChunkBatch.from_json({"chunks": [{"lease": lease, "offset": 0, "data": data}]})
    assert batch.chunks[0].skipped is False
    assert w.LogChunkBatch.from_json(batch.to_json()) == batch
    import pytest
    with pytest.raises(w.WireFormatError):
        w.LogChunkBatch.from_json({"chunks": []})
    with pytest.raises(w.WireFormatError):
        w.LogChunkBatch.from_json({"chunks": [{"lease": lease, "offset": -1, "data": data}]})
    too_big = base64.b64encode(b"x" * (w.MAX_CHUNK_BYTES + 1)).decode()
    with pytest.raises(w.WireFormatError):
        w.LogChunkBatch.from_json({"chunks": [{"lease": lease, "offset": 0, "data": too_big}]})


def test_completion_without_layout_leaves_the_field_out_for_older_replicas() -> None:
    from qinglong.shared import wire as w
    lease = w.LeaseRef("018f0000-0000-7000-8000-000000000001",
                       "11111111-1111-4111-8111-111111111111", 1)
    plain = w.CompletionReport(lease, "succeeded", 0, None, None)
    assert "layout" not in plain.to_json()
    cut = w.CompletionReport(lease, "succeeded", 0, None, None,
                             layout=w.LogLayout(raw_bytes=100, head_bytes=10, tail_offset=60))
    assert w.CompletionReport.from_json(cut.to_json()) == cut


def test_secret_names_are_left_out_of_the_json_when_empty() -> None:
    """``ClaimedAttempt.secret_names`` (docs/protocols.md §4.2 "Secret masking (worker)"):
    absent from the JSON when empty, so an older worker's strict decoder accepts the
    answer; present and decoded when set, in a ClaimAnswer too."""
    from qinglong.shared.wire import ClaimAnswer, ClaimedAttempt

    plain = ClaimedAttempt.from_json(_claimed(shell="true"))
    assert plain.secret_names == [] and "secret_names" not in plain.to_json()
    assert "secret_names" not in ClaimAnswer([plain]).to_json()["attempts"][0]
    named = ClaimedAttempt.from_json(_claimed(shell="true", secret_names=["API_KEY"]))
    assert named.to_json()["secret_names"] == ["API_KEY"]
    assert ClaimAnswer([named]).to_json()["attempts"][0]["secret_names"] == ["API_KEY"]
