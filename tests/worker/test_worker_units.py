"""Pure unit tests of the worker's rules: fence deadline, client status mapping and retry
deadline, labels, token file, exit status, capped spool, clean environment."""

from __future__ import annotations

import os
import stat
import time
import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qinglong.shared import wire
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7
from qinglong.worker.cli import _control_urls, _labels
from qinglong.worker.client import ControlClient
from qinglong.worker.clock import now as clock_now
from qinglong.worker.credentials import load_token, read_token_file
from qinglong.worker.environment import SYSTEMD_DEFAULT_PATH, attempt_environment
from qinglong.worker.errors import (
    ControlAuthError,
    ControlRejectedError,
    ControlUnavailableError,
    LeaseLostError,
    TokenError,
)
from qinglong.worker.fencing import LeaseFence, fence_margin_ms
from qinglong.worker.group_wrapper import take_input
from qinglong.worker.process import decode_status
from qinglong.worker.spool import CappedCopier, marker_line

LEASE = wire.LeaseRef(attempt_id=uuid7(), lease_token=str(uuid.uuid4()), lease_version=1)


def test_fence_deadline_is_send_time_plus_lease_minus_margin_and_only_moves_forward():
    assert fence_margin_ms(3000) == 1000
    assert fence_margin_ms(60000) == 6000
    fence = LeaseFence(sent_at=100.0, lease_ms=30000)
    assert fence.deadline == pytest.approx(100.0 + 27.0)
    fence.renewed(sent_at=90.0, lease_ms=30000, now=111.0)  # a late answer of an older request
    assert fence.deadline == pytest.approx(127.0)
    assert fence.renewed(sent_at=110.0, lease_ms=30000, now=111.0)
    assert fence.deadline == pytest.approx(137.0)
    assert fence.expired(now=137.0)
    assert not fence.expired(now=136.9)


def test_a_fence_that_passed_stays_passed_whatever_answer_comes_later():
    fence = LeaseFence(sent_at=100.0, lease_ms=3000)  # deadline 102
    assert not fence.renewed(sent_at=101.5, lease_ms=3000, now=102.0)  # read after a freeze
    assert fence.deadline == pytest.approx(102.0)
    assert fence.expired(now=102.0)


def test_fence_listeners_hear_the_deadline_now_and_each_forward_move_only():
    fence = LeaseFence(sent_at=100.0, lease_ms=3000)
    heard: list[float] = []
    fence.subscribe(heard.append)
    fence.renewed(sent_at=99.0, lease_ms=3000, now=101.0)  # older: the deadline does not move
    fence.renewed(sent_at=101.0, lease_ms=3000, now=101.0)
    assert heard == pytest.approx([102.0, 103.0])


def test_wrapper_reads_deadline_lines_and_the_release_byte():
    assert take_input(b"", None) == (b"", None, False)
    assert take_input(b"d12.5\nd11.0\n", None) == (b"", 12.5, False)
    assert take_input(b"dnan\ndinf\nd-3\ndjunk\nx", 12.5) == (b"", 12.5, False)
    assert take_input(b"d13.25\nd14", 12.5) == (b"d14", 13.25, False)  # rest: incomplete
    assert take_input(b"d14.5\nq", 13.25) == (b"", 14.5, True)


def _client(handler) -> ControlClient:
    return ControlClient("http://control", "tok", transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(("status", "error"), [
    (409, LeaseLostError), (401, ControlAuthError), (403, ControlAuthError),
    (422, ControlRejectedError),
])
def test_client_maps_statuses_to_typed_errors_without_retrying(status, error):
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(status, json={"code": "x"})

    with pytest.raises(error):
        _client(handler).heartbeat(wire.HeartbeatReport(lease=LEASE), time.monotonic() + 5)
    assert len(calls) == 1
    assert calls[0].url.path == "/v1/worker/heartbeat"
    assert calls[0].headers["authorization"] == "Bearer tok"


def test_client_retries_5xx_but_never_past_the_callers_deadline():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(time.monotonic())
        return httpx.Response(503)

    start = time.monotonic()
    with pytest.raises(ControlUnavailableError):
        _client(handler).heartbeat(wire.HeartbeatReport(lease=LEASE), start + 0.8)
    assert len(calls) >= 2
    assert max(calls) < start + 0.8
    assert time.monotonic() - start < 1.0


def test_client_replay_after_a_5xx_returns_the_answer():
    answers = iter([httpx.Response(502), httpx.Response(200, json={"cancel": True,
                                                                    "lease_ms": 3000})])
    got = _client(lambda _r: next(answers)).heartbeat(wire.HeartbeatReport(lease=LEASE),
                                                       time.monotonic() + 5)
    assert got == wire.HeartbeatAnswer(cancel=True, lease_ms=3000)


def test_labels_parse_and_refuse_bad_input_as_usage_errors():
    assert _labels("zone=a, gpu=yes") == {"zone": "a", "gpu": "yes"}
    assert _labels("") == {}
    with pytest.raises(ValidationError):
        _labels("zone")
    with pytest.raises(ValidationError):
        _labels("zone=a b")


def test_token_file_must_be_private_and_the_env_variable_is_removed(tmp_path):
    env = {"QL3_WORKER_TOKEN": "from-env", "OTHER": "1"}
    path = tmp_path / "token"
    path.write_text("secret-token\n")
    path.chmod(0o644)
    with pytest.raises(TokenError, match="chmod 600") as caught:
        load_token(str(path), env)
    assert "secret-token" not in str(caught.value)
    assert env == {"OTHER": "1"}
    path.chmod(0o600)
    assert load_token(str(path), {}) == "secret-token"
    assert load_token(None, {"QL3_WORKER_TOKEN": "t"}) == "t"
    with pytest.raises(TokenError):
        load_token(None, {})


@pytest.mark.parametrize("mode", [0o440, 0o640, 0o460, 0o444, 0o604], ids=oct)
def test_a_token_file_readable_by_its_group_is_refused_even_roots_of_the_own_group(
        tmp_path, monkeypatch, mode):
    """Owner-only, nothing else: a root-owned file readable by the worker's own group (what
    a Kubernetes Secret volume with the pod's fsGroup looks like) is refused like any other
    group-readable file — tasks run with the worker's group — at start and at a reload."""
    path = tmp_path / "token"
    path.write_text("secret-token\n")
    path.chmod(0o600)
    real_fstat = os.fstat

    def as_secret_volume(fd: int) -> os.stat_result:
        got = real_fstat(fd)
        fields = list(got[:10])
        fields[0], fields[4], fields[5] = stat.S_IFREG | mode, 0, os.getegid()
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", as_secret_volume)
    for read in (lambda: load_token(str(path), {}), lambda: read_token_file(str(path))):
        with pytest.raises(TokenError, match="chmod 600") as caught:
            read()
        assert "secret-token" not in str(caught.value)


def test_exit_status_follows_the_shell_convention():
    assert decode_status(0).exit_code == 0
    assert decode_status(3).exit_code == 3
    assert decode_status(143).signal == 15
    assert decode_status(-9).signal == 9


def _copy(tmp_path, limit: int, pieces: list[bytes]):
    r, w = os.pipe()
    spool = tmp_path / "s.log"
    fd = os.open(spool, os.O_WRONLY | os.O_CREAT, 0o600)
    seen: list[bytes] = []
    copier = CappedCopier(r, fd, limit, spool, on_output=seen.append)
    copier.start()
    for piece in pieces:
        os.write(w, piece)
    os.close(w)
    result = copier.finish(1.0)
    assert b"".join(seen) == b"".join(pieces)  # the live stream sees every raw byte
    assert list(tmp_path.glob("s.tail*")) == []
    return spool.read_bytes(), result, copier


def test_capped_copier_keeps_head_marker_and_tail(tmp_path):
    body, result, copier = _copy(tmp_path, 10, [b"0123456789"] * 5)
    assert body == b"01234" + marker_line(42, after_newline=False) + b"789"
    assert copier.truncated
    assert result.raw_bytes == 50
    assert result.layout == wire.LogLayout(raw_bytes=50, head_bytes=5, tail_offset=47)


def test_capped_copier_under_the_limit_keeps_everything_and_no_layout(tmp_path):
    body, result, copier = _copy(tmp_path, 100, [b"x" * 30, b"y" * 40, b"z" * 30])
    assert body == b"x" * 30 + b"y" * 40 + b"z" * 30
    assert (result.raw_bytes, result.layout, copier.truncated) == (100, None, False)


@given(st.lists(st.text(min_size=1, max_size=40).map(str.encode), min_size=1, max_size=30),
       st.integers(min_value=4, max_value=200))
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_capped_copier_never_splits_a_utf8_character(tmp_path_factory, pieces, limit):
    tmp = tmp_path_factory.mktemp("cap")
    body, result, _ = _copy(tmp, limit, pieces)
    raw = b"".join(pieces)
    if result.layout is None:
        assert body == raw
        return
    lay = result.layout
    head, tail = raw[:lay.head_bytes], raw[lay.tail_offset:]
    left_out = lay.tail_offset - lay.head_bytes
    assert body == head + marker_line(left_out, head == b"" or head.endswith(b"\n")) + tail
    head.decode()  # whole characters both sides of the marker
    tail.decode()
    assert lay.head_bytes + (lay.raw_bytes - lay.tail_offset) <= limit


def test_attempt_environment_is_clean_and_task_values_win():
    env = attempt_environment({"PATH": "/opt/bin", "X": "1"},
                              {"HOME": "/home/w", "QL3_WORKER_TOKEN": "t", "SECRET": "s"})
    assert env == {"PATH": "/opt/bin", "HOME": "/home/w", "LANG": "C.UTF-8", "X": "1"}
    assert attempt_environment({}, {})["PATH"] == SYSTEMD_DEFAULT_PATH


def test_a_suspended_host_finds_its_fence_passed_on_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lease keeps expiring on the database's clock while this host sleeps: the fence must
    count suspended time (CLOCK_BOOTTIME), which CLOCK_MONOTONIC does not."""
    import time as real_time

    from qinglong.worker.fencing import LeaseFence

    suspended = {"s": 0.0}
    real_gettime = real_time.clock_gettime

    def gettime(clock_id: int) -> float:
        value = real_gettime(clock_id)
        return value + suspended["s"] if clock_id == real_time.CLOCK_BOOTTIME else value

    monkeypatch.setattr(real_time, "clock_gettime", gettime)
    fence = LeaseFence(real_time.clock_gettime(real_time.CLOCK_BOOTTIME), lease_ms=30_000)
    assert not fence.expired()
    suspended["s"] = 60.0  # the host slept a minute: monotonic time did not move
    assert fence.expired()


def _replicas(handler) -> ControlClient:
    return ControlClient(["http://c1", "http://c2/"], "tok",
                         transport=httpx.MockTransport(handler))


@pytest.mark.parametrize("failure", ["connect_error", "connect_timeout", 502, 503, 504])
def test_client_moves_to_the_next_replica_on_a_connection_failure_within_one_call(failure):
    hosts = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "c1":
            if failure == "connect_error":
                raise httpx.ConnectError("refused", request=request)
            if failure == "connect_timeout":
                raise httpx.ConnectTimeout("slow", request=request)
            return httpx.Response(failure)
        return httpx.Response(200, json={"cancel": False, "lease_ms": 3000})

    client = _replicas(handler)
    got = client.heartbeat(wire.HeartbeatReport(lease=LEASE), clock_now() + 5)
    assert got.lease_ms == 3000
    assert hosts == ["c1", "c2"]
    assert client.current_url == "http://c2"  # and it stays there
    client.heartbeat(wire.HeartbeatReport(lease=LEASE), clock_now() + 5)
    assert hosts == ["c1", "c2", "c2"]


def test_client_retries_a_500_on_the_same_replica_and_wraps_around_after_the_last():
    hosts = []
    answers = iter([500, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "c2":
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(next(answers), json={"cancel": False, "lease_ms": 3000})

    client = _replicas(handler)
    client.heartbeat(wire.HeartbeatReport(lease=LEASE), clock_now() + 5)
    assert hosts == ["c1", "c1"]
    answers = iter([503, 200])
    client.heartbeat(wire.HeartbeatReport(lease=LEASE), clock_now() + 5)
    assert hosts[2:] == ["c1", "c2", "c1"]


def test_a_401_marks_the_token_refused_and_a_403_names_its_code():
    client = _client(lambda _r: httpx.Response(401, json={"code": "unauthorized"}))
    with pytest.raises(ControlAuthError, match="revoked or unknown"):
        client.claim(wire.ClaimRequest(incarnation_id=uuid7(), max_attempts=1))
    assert client.token_refused.is_set()
    client = _client(lambda _r: httpx.Response(403, json={"code": "labels_outside_pool"}))
    with pytest.raises(ControlAuthError, match="outside the token's pool") as err:
        client.register(wire.WorkerRegistration(name="w", labels={}, concurrency=1))
    assert err.value.error_code == "labels_outside_pool"
    assert not client.token_refused.is_set()


def test_a_401_reloads_the_token_once_and_sends_the_request_again_with_a_new_one(caplog):
    """With ``reload_token`` a 401 reads the token again: a new one is used for the retry
    and every later request; the same one (or an unreadable file) leaves the 401 standing,
    read once per refused request. The tokens never reach the log."""
    seen = []
    valid = {"Bearer new-token"}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if request.headers["Authorization"] not in valid:
            return httpx.Response(401, json={"code": "unauthorized"})
        return httpx.Response(200, json={"attempts": []})

    reads = []

    def reload() -> str:
        reads.append(1)
        return "new-token"

    client = ControlClient("http://control", "old-token", reload_token=reload,
                           transport=httpx.MockTransport(handler))
    claim = wire.ClaimRequest(incarnation_id=uuid7(), max_attempts=1)
    with caplog.at_level("INFO", logger="qinglong.worker"):
        assert client.claim(claim) == ([], [])
        assert seen == ["Bearer old-token", "Bearer new-token"] and len(reads) == 1
        assert client.claim(claim) == ([], [])
        assert seen[2:] == ["Bearer new-token"] and len(reads) == 1
        assert not client.token_refused.is_set()
        valid.clear()  # the new token is refused too, and the file holds it still
        with pytest.raises(ControlAuthError):
            client.claim(claim)
        assert seen[3:] == ["Bearer new-token"] and len(reads) == 2
        assert client.token_refused.is_set()
    assert "switching to the new token" in caplog.text
    assert "holds the same token" in caplog.text
    assert "old-token" not in caplog.text and "new-token" not in caplog.text

    def unreadable() -> str:
        raise TokenError("--token-file", "cannot open (No such file or directory)")

    client = ControlClient("http://control", "old-token", reload_token=unreadable,
                           transport=httpx.MockTransport(handler))
    with pytest.raises(ControlAuthError):
        client.claim(claim)
    assert client.token_refused.is_set()


@pytest.mark.parametrize("text", ["http://h:1/v1", "http://h:1/v1/", "http://a:1,http://h:1/v1",
                                  "", " , ", "ftp://host:21", "http://a:1,http://a:1/"])
def test_control_urls_refuse_v1_suffixes_bad_schemes_empties_and_repeats(text):
    with pytest.raises(ValidationError):
        _control_urls(text)


def test_control_urls_split_on_commas_in_order():
    assert _control_urls(" http://a:1 ,http://b:2/") == ["http://a:1", "http://b:2/"]


def test_capped_copier_masks_a_secret_split_across_writes_before_the_cap_and_the_stream(
        tmp_path):
    """docs/operations.md §9 (cluster half): the masker runs first, so the live stream, the
    spool and the raw byte count see ``***``; a value cut between two writes (with the
    reader between them) is still masked, and what it held back is flushed at the end."""
    import time

    from qinglong.shared.output_mask import OutputMasker

    r, w = os.pipe()
    spool = tmp_path / "s.log"
    fd = os.open(spool, os.O_WRONLY | os.O_CREAT, 0o600)
    seen: list[bytes] = []
    copier = CappedCopier(r, fd, 1 << 20, spool, on_output=seen.append,
                          masker=OutputMasker([b"hunter2-secret"]))
    copier.start()
    os.write(w, b"key=hunter")
    time.sleep(0.2)  # the copier reads the first piece alone
    os.write(w, b"2-secret!\nend hunt")
    os.close(w)
    result = copier.finish(1.0)
    assert result is not None
    assert spool.read_bytes() == b"key=***!\nend hunt" == b"".join(seen)
    assert result.raw_bytes == len(b"key=***!\nend hunt")


def test_a_multi_account_secret_is_masked_whole_and_account_by_account() -> None:
    """``JD_COOKIE=ck1&ck2`` (Qinglong's multi-account form, also one per line): scripts split
    it and print one account at a time, so each part is masked as well as the whole value
    (docs/operations.md §9); a part under 6 bytes is not (output_mask.py)."""
    import uuid

    from qinglong.shared import wire
    from qinglong.shared.ids import uuid7
    from qinglong.worker.spool import secret_masker

    lease = wire.LeaseRef(attempt_id=uuid7(), lease_token=str(uuid.uuid4()), lease_version=1)
    attempt = wire.ClaimedAttempt(
        lease=lease, run_id=uuid7(), task_id=uuid7(), task_name="京东签到", run_number=1,
        attempt_number=1, argv=["true"], shell=None,
        env={"JD_COOKIE": "pt_key=AAA111;&pt_key=BBB222;\npt_key=CCC333;&ab",
             "PLAIN": "pt_key=AAA111;"},
        cwd=None, timeout_ms=None, log_limit_bytes=1024, lease_ms=30000,
        heartbeat_ms=10000, secret_names=["JD_COOKIE"])
    masker = secret_masker(attempt)
    assert masker is not None
    out = masker.feed("账号2 pt_key=BBB222; 账号3 pt_key=CCC333; ab\n".encode()) + masker.flush()
    assert out == "账号2 *** 账号3 *** ab\n".encode()
