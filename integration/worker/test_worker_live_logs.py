"""Live log chunks from a real worker to the fake control over real HTTP (docs/protocols.md
§4.7 "Live logs (worker)"; the fake implements log-chunk's offset CAS, 416, 409 and replay):
order and completeness, byte-exact raw offsets, resync, fencing, an old replica, the bucket,
and the head + tail cap with the worker's memory flat."""

from __future__ import annotations

import time

import pytest
from fake_control import make_attempt
from worker_kit import wait_group_gone, wait_until

pytestmark = pytest.mark.integration


def _aid(attempt: dict) -> str:
    return attempt["lease"]["attempt_id"]


def _chunks(control, aid: str) -> list[dict]:
    return [c for batch in control.seen("log-chunk") for c in batch["chunks"]
            if c["lease"]["attempt_id"] == aid]


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_a_steady_task_streams_in_order_with_no_gap_while_it_runs(control, start_worker):
    attempt = make_attempt('for i in $(seq 1 25); do echo "第${i}行 line $i"; sleep 0.1; done')
    control.queue.append(attempt)
    start_worker()
    aid = _aid(attempt)
    control.wait_for("started")
    wait_until(lambda: control.live_log(aid).end > 0, 5.0, "a chunk while the task runs")
    assert control.seen("complete") == []  # streamed live, not at the end
    control.wait_for("complete", timeout_s=15.0)
    expected = "".join(f"第{i}行 line {i}\n" for i in range(1, 26)).encode()
    live = control.live_log(aid)
    assert live.data() == expected
    assert live.gaps == []
    offsets = [c["offset"] for c in _chunks(control, aid)]
    assert offsets == sorted(offsets)
    assert len(offsets) >= 2  # flushed about once a second, not once at the end
    assert {r[3] for r in control.chunk_results} == {200}
    assert control.puts[0][1] == expected
    # the last chunk went before the upload grant was asked
    with control.lock:
        routes = [r for _, r, _ in control.log]
    assert routes.index("log-upload") > max(i for i, r in enumerate(routes) if r == "log-chunk")


def test_a_1mb_line_non_utf8_and_carriage_returns_are_byte_exact(control, start_worker):
    script = ("head -c 1000000 /dev/zero | tr '\\0' x; printf '\\n'; "
              "printf '\\377\\376\\200 bad bytes\\n'; "
              "printf '进度 10%%\\r进度 50%%\\r进度 100%%\\n'; printf 'no newline at the end'")
    attempt = make_attempt(script, log_limit_bytes=4 * 1024 * 1024)
    control.queue.append(attempt)
    start_worker("--log-stream-burst", str(4 * 1024 * 1024))
    control.wait_for("complete", timeout_s=20.0)
    expected = (b"x" * 1000000 + b"\n\xff\xfe\x80 bad bytes\n"
                + "进度 10%\r进度 50%\r进度 100%\n".encode() + b"no newline at the end")
    live = control.live_log(_aid(attempt))
    assert live.gaps == []
    assert live.data() == expected
    assert all(len(p) <= 64 * 1024 for _, p in live.pieces)
    assert control.puts[0][1] == expected


def test_a_416_makes_the_worker_resend_from_the_stored_end(control, start_worker):
    attempt = make_attempt('for i in $(seq 1 20); do echo "行 $i"; sleep 0.1; done')
    aid = _aid(attempt)
    control.split_next_chunk.add(aid)  # stores half of the first chunk, answers 416
    control.queue.append(attempt)
    start_worker()
    control.wait_for("complete", timeout_s=15.0)
    expected = "".join(f"行 {i}\n" for i in range(1, 21)).encode()
    live = control.live_log(aid)
    assert control.chunk_results[0][3] == 416
    first_end = control.chunk_results[0][4]
    assert control.chunk_results[1][2] == first_end  # resent from the end given
    assert live.gaps == []
    assert live.data() == expected


def test_a_lost_chunk_answer_is_resent_and_stored_once(control, start_worker):
    attempt = make_attempt('for i in $(seq 1 12); do echo "line $i"; sleep 0.1; done')
    aid = _aid(attempt)
    control.lose_answers["log-chunk"] = 1
    control.queue.append(attempt)
    start_worker()
    control.wait_for("complete", timeout_s=15.0)
    live = control.live_log(aid)
    assert live.data() == "".join(f"line {i}\n" for i in range(1, 13)).encode()
    assert live.gaps == []
    assert control.chunk_results[1][2] == control.chunk_results[0][2]  # the same chunk again


def test_a_409_on_a_chunk_fences_the_attempt(control, start_worker):
    attempt = make_attempt("while :; do echo tick; sleep 0.05; done", lease_ms=30000,
                           heartbeat_ms=10000)
    aid = _aid(attempt)
    control.queue.append(attempt)
    start_worker()
    pgid = control.wait_for("started")[0]["pid"]
    wait_until(lambda: control.live_log(aid).end > 0, 5.0, "first chunk")
    control.stale_leases.add(aid)
    # the next flush (1 s) and the kill; the worker's own deadline would come only at the
    # lease (30 s) less its margin, so a group gone within a third of it was fenced by the 409
    wait_group_gone(pgid, timeout_s=10.0)
    time.sleep(1.0)
    assert control.seen("complete") == []
    assert control.seen("log-upload") == []


def test_an_old_replica_404_stops_streaming_and_the_log_is_still_uploaded(control,
                                                                          start_worker):
    control.force["log-chunk"] = 404
    attempt = make_attempt('for i in $(seq 1 30); do echo "line $i"; sleep 0.1; done')
    control.queue.append(attempt)
    worker = start_worker()
    done = control.wait_for("complete", timeout_s=15.0)[0]
    assert done["outcome"] == "succeeded"
    assert len(control.seen("log-chunk")) == 1  # tried again only a minute later
    assert control.puts[0][1] == "".join(f"line {i}\n" for i in range(1, 31)).encode()
    assert "404" in worker.stderr()


def test_a_flood_past_the_bucket_is_a_skipped_gap_and_the_object_keeps_everything(
        control, start_worker):
    size = 3 * 1024 * 1024
    attempt = make_attempt(f"head -c {size} /dev/zero | tr '\\0' y; echo END",
                           log_limit_bytes=8 * 1024 * 1024)
    aid = _aid(attempt)
    control.queue.append(attempt)
    start_worker("--log-stream-rate", "65536", "--log-stream-burst", "262144")
    control.wait_for("complete", timeout_s=30.0)
    live = control.live_log(aid)
    expected = b"y" * size + b"END\n"
    assert live.gaps, "bytes past the bucket are recorded as a gap"
    assert any(c["skipped"] for c in _chunks(control, aid))
    gap_bytes = sum(b - a for a, b in live.gaps)
    assert len(live.data()) + gap_bytes == len(expected)  # every raw byte: stored or gap
    assert live.end == len(expected)
    assert len(live.data()) < len(expected) // 2
    for offset, piece in live.pieces:  # what was streamed sits at its raw offset
        assert expected[offset:offset + len(piece)] == piece
    assert control.puts[0][1] == expected  # the object is the complete record


def test_the_cap_keeps_head_and_tail_without_splitting_a_character_and_memory_stays_flat(
        control, start_worker):
    from qinglong.worker.spool import marker_line

    limit = 1024 * 1024 + 1  # the head ends inside a 3-byte character
    lines = 600_000  # "第NNNNNN行 汉字\n" ≈ 20 bytes a line: ≈ 12 MB, 12 × the cap
    script = (f"seq 1 {lines} | sed 's/.*/第&行 汉字/'; echo 最后一行")
    attempt = make_attempt(script, log_limit_bytes=limit, lease_ms=30000, heartbeat_ms=10000)
    control.queue.append(attempt)
    worker = start_worker()
    control.wait_for("register")
    wait_until(lambda: control.seen("claim"), 10.0, "worker claiming")
    before = _rss_kib(worker.proc.pid)
    done = control.wait_for("complete", timeout_s=60.0)[0]
    peak = _rss_kib(worker.proc.pid, "VmHWM")
    raw = ("".join(f"第{i}行 汉字\n" for i in range(1, lines + 1)) + "最后一行\n").encode()
    layout = done["layout"]
    assert layout["raw_bytes"] == len(raw)
    head, tail = raw[:layout["head_bytes"]], raw[layout["tail_offset"]:]
    left_out = layout["tail_offset"] - layout["head_bytes"]
    body = control.puts[0][1]
    assert body == head + marker_line(left_out, head.endswith(b"\n")) + tail
    head.decode()  # no character cut, on either side of the marker
    tail.decode()
    assert len(head) <= limit // 2 and len(head) >= limit // 2 - 3
    assert tail.endswith("最后一行\n".encode())
    assert len(head) + len(tail) <= limit
    assert f"[ql3: {left_out} bytes left out]".encode() in body
    # the tail lives on disk: the worker's peak stays far below the output size (12 MB)
    assert peak - before < 8 * 1024, (before, peak)


def test_a_replica_going_away_mid_stream_loses_and_repeats_nothing(control, start_worker):
    """Two replicas over one database (the fakes share their state): the first is shut
    down while chunks flow; the worker's next requests go to the second, from the stored
    end, and the live log is the task's output exactly."""
    from fake_control import FakeControl

    second = FakeControl()
    for name in ("live", "lock", "log", "chunk_results", "puts", "put_tries",
                 "last_ok_heartbeat"):
        setattr(second, name, getattr(control, name))
    second.start()
    try:
        attempt = make_attempt('for i in $(seq 1 40); do echo "第${i}行"; sleep 0.1; done')
        aid = _aid(attempt)
        control.queue.append(attempt)
        start_worker(control_url=f"{control.url},{second.url}")
        wait_until(lambda: control.live_log(aid).end > 0, 10.0, "chunks through the first")
        control.close()  # the replica goes away: connections refused from now on
        closed_at = time.monotonic()
        done = control.wait_for("complete", timeout_s=20.0)[0]
        assert done["outcome"] == "succeeded"
        expected = "".join(f"第{i}行\n" for i in range(1, 41)).encode()
        live = control.live_log(aid)
        assert live.data() == expected
        assert live.gaps == []
        assert any(at > closed_at and status == 200
                   for at, _, _, status, _ in control.chunk_results)
        assert control.puts[-1][1] == expected
    finally:
        second.close()


def test_the_upload_streams_the_spool_so_memory_does_not_grow_with_the_log(control,
                                                                         start_worker):
    size = 24 * 1024 * 1024  # under the cap: the whole output is the log
    attempt = make_attempt(f"head -c {size} /dev/zero | tr '\\0' z",
                           log_limit_bytes=32 * 1024 * 1024, lease_ms=30000,
                           heartbeat_ms=10000)
    control.queue.append(attempt)
    worker = start_worker()
    wait_until(lambda: control.seen("claim"), 10.0, "worker claiming")
    before = _rss_kib(worker.proc.pid)
    done = control.wait_for("complete", timeout_s=60.0)[0]
    peak = _rss_kib(worker.proc.pid, "VmHWM")
    assert done["log"]["size_bytes"] == size
    assert len(control.puts[0][1]) == size
    assert peak - before < 8 * 1024, (before, peak)  # far below the log's 24 MiB
