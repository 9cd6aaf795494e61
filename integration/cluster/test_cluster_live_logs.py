"""Live cluster logs, control's side (docs/protocols.md §4.4 raw read and following, §4.9).

Real ``ql3 control serve`` replicas on a fresh PostgreSQL database and moto's S3 over real
HTTP. The worker is scripted (``live_log_kit.ScriptedWorker``): it claims an attempt and sends
chunks through ``POST /v1/worker/log-chunk`` exactly as the wire types say.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster_kit import Cluster, wait_for
from live_log_kit import (
    ScriptedWorker,
    manual_task,
    raw_read,
    read_all_raw,
    sse_events,
)
from loopback_proxy import LoopbackProxy

pytestmark = pytest.mark.integration
LEASE_MS, HEARTBEAT_MS = 3000, 1000


class Scene:
    """Control replica(s), an admin and a viewer token, a scripted worker."""

    def __init__(self, cluster: Cluster, replicas: int = 1) -> None:
        self.cluster = cluster
        self.admin = cluster.token("admin")
        self.viewer = cluster.token("viewer")
        self.worker_token = cluster.token("worker", pool="default", labels="zone=a")
        self.controls = cluster.start_controls([f"c{i + 1}" for i in range(replicas)],
                                               lease_ms=LEASE_MS, heartbeat_ms=HEARTBEAT_MS)
        self.url = str(self.controls[0].url)
        self.worker = ScriptedWorker(self.url, self.worker_token)
        self.db = cluster.db.connect()

    def leased(self, **task: Any) -> Any:
        manual_task(self.cluster, self.url, self.admin, **task)
        return self.worker.claim()

    def one(self, sql: str, *args: Any) -> Any:
        row = self.db.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def close(self) -> None:
        self.worker.http.close()
        self.db.close()

    def rows(self, attempt_id: str) -> int:
        return int(self.one("SELECT count(*) FROM attempt_log_chunks WHERE attempt_id = %s",
                            attempt_id))


@pytest.fixture
def scene(cluster: Cluster) -> Iterator[Scene]:
    made = Scene(cluster)
    try:
        yield made
    finally:
        made.close()


def test_chunks_append_refuse_a_wrong_start_replay_and_record_a_skipped_gap(
        scene: Scene) -> None:
    lease = scene.leased()
    w = scene.worker
    first = w.send(lease, 0, "你好 hello\n".encode())
    assert first["results"] == [{"attempt_id": lease.attempt_id, "status": 200, "end": 13,
                                 "replayed": False}]
    assert first["flush_ms"] == 1000
    again = w.send(lease, 0, "你好 hello\n".encode())  # its answer was lost: the resend
    assert again["results"][0] == {"attempt_id": lease.attempt_id, "status": 200, "end": 13,
                                   "replayed": True}
    overlap = w.send(lease, 7, b"lo\nmore")
    assert (overlap["results"][0]["status"], overlap["results"][0]["end"]) == (416, 13)
    hole = w.send(lease, 20, b"x")
    assert (hole["results"][0]["status"], hole["results"][0]["end"]) == (416, 13)
    skipped = w.send(lease, 20, b"tail\n", skipped=True)
    assert (skipped["results"][0]["status"], skipped["results"][0]["end"]) == (200, 25)
    assert scene.one("SELECT log_end FROM attempts WHERE id = %s", lease.attempt_id) == 25
    gaps = scene.db.execute("SELECT start_offset, end_offset FROM attempt_log_chunks"
                            " WHERE attempt_id = %s AND gap", (lease.attempt_id,)).fetchall()
    assert gaps == [(13, 20)]

    r = raw_read(scene.url, scene.viewer, lease.attempt_id, offset=0)
    assert r.status_code == 200 and r.headers["content-type"] == "application/octet-stream"
    assert r.content == "你好 hello\n".encode()
    assert (r.headers["QL3-Log-Offset"], r.headers["QL3-Log-Gap"], r.headers["QL3-Log-Next"],
            r.headers["QL3-Log-State"], r.headers["QL3-Attempt-Status"]) == (
        "0", "0", "13", "running", "running")
    r = raw_read(scene.url, scene.viewer, lease.attempt_id, offset=15)  # inside the gap
    assert (r.content, r.headers["QL3-Log-Offset"], r.headers["QL3-Log-Gap"],
            r.headers["QL3-Log-Next"]) == (b"tail\n", "20", "5", "25")
    r = raw_read(scene.url, scene.viewer, lease.attempt_id, tail=3)
    assert (r.content, r.headers["QL3-Log-Offset"]) == (b"il\n", "22")
    # the plain route reads a running log too (no more 404 log_pending), the gap marked
    r = httpx.get(f"{scene.url}/v1/attempts/{lease.attempt_id}/log",
                  headers={"Authorization": f"Bearer {scene.viewer}"})
    assert r.status_code == 200
    assert r.content == "你好 hello\n\n[ql3: 7 bytes not shown]\ntail\n".encode()


def test_raw_read_is_byte_exact_live_and_after_completion(scene: Scene) -> None:
    lease = scene.leased()
    log = (b"start \xff\xfe not utf-8 \xc3(\n"
           + b"".join(b"\r[%-20s] %3d%%" % (b"#" * (i // 5), i) for i in range(101)) + b"\n"
           + "中文行\n".encode() + b"L" * (1024 * 1024) + b"\nend\xe4\xb8\n")
    offset = 0
    while offset < len(log):
        piece = log[offset:offset + 65536]
        assert scene.worker.send(lease, offset, piece)["results"][0]["status"] == 200
        offset += len(piece)
    live, gaps = _read_until(scene, lease.attempt_id, len(log))
    assert live == log and gaps == []
    assert scene.rows(lease.attempt_id) > 0
    done = scene.worker.complete(lease, body=log)
    assert done.status_code == 200, done.text
    assert scene.rows(lease.attempt_id) == 0  # a verified artifact: the rows went with it
    final, gaps = read_all_raw(scene.url, scene.viewer, lease.attempt_id)
    assert final == log and gaps == []


def _read_until(scene: Scene, attempt_id: str, end: int) -> tuple[bytes, list[Any]]:
    out, gaps, offset = bytearray(), [], 0
    while offset < end:
        r = raw_read(scene.url, scene.viewer, attempt_id, offset=offset)
        assert r.status_code == 200 and len(r.content) <= 1024 * 1024
        if int(r.headers["QL3-Log-Gap"]):
            gaps.append((offset, int(r.headers["QL3-Log-Gap"])))
        out += r.content
        offset = int(r.headers["QL3-Log-Next"])
    return bytes(out), gaps


def test_a_stale_lease_after_recovery_gets_409_and_the_lost_log_stays_partial(
        scene: Scene) -> None:
    lease = scene.leased()
    assert scene.worker.send(lease, 0, b"before the worker froze\n")["results"][0]["end"] == 24
    # no heartbeat: recovery moves the attempt to lost once its lease expires
    assert wait_for(lambda: scene.one("SELECT status FROM attempts WHERE id = %s",
                                      lease.attempt_id) == "lost", 30), "never lost"
    late = scene.worker.send(lease, 24, b"late output\n")
    assert late["results"][0] == {"attempt_id": lease.attempt_id, "status": 409, "end": None,
                                  "replayed": False}
    assert scene.one("SELECT log_end FROM attempts WHERE id = %s", lease.attempt_id) == 24
    assert scene.rows(lease.attempt_id) == 1
    r = raw_read(scene.url, scene.viewer, lease.attempt_id, offset=0)
    assert r.content == b"before the worker froze\n"
    assert (r.headers["QL3-Log-State"], r.headers["QL3-Log-Partial"],
            r.headers["QL3-Attempt-Status"]) == ("complete", "1", "lost")
    whole = httpx.get(f"{scene.url}/v1/attempts/{lease.attempt_id}/log",
                      headers={"Authorization": f"Bearer {scene.viewer}"})
    assert whole.status_code == 200 and whole.content == b"before the worker froze\n"
    assert whole.headers["QL3-Log-Partial"] == "1"


def test_an_expired_partial_log_is_swept_and_reads_as_retired(scene: Scene) -> None:
    from qinglong.control.db.engine import create_engine
    from qinglong.control.livelog.sweep import sweep_partial_logs

    lease = scene.leased(retention_s=0)
    scene.worker.send(lease, 0, b"partial\n")
    done = scene.worker.complete(lease, outcome="failed")  # no log stored: rows stay
    assert done.status_code == 200, done.text
    assert scene.rows(lease.attempt_id) == 1
    engine = create_engine(scene.cluster.db.runtime_url)
    try:
        assert sweep_partial_logs(engine) == 1
    finally:
        engine.dispose()
    assert scene.rows(lease.attempt_id) == 0
    for params in ({"offset": 0}, {}):
        r = raw_read(scene.url, scene.viewer, lease.attempt_id, **params)
        assert r.status_code == 410 and r.json()["error"]["code"] == "log_retired"


def test_a_capped_artifact_maps_raw_offsets_through_its_layout(scene: Scene) -> None:
    lease = scene.leased()
    raw = b"".join(b"line %04d\n" % i for i in range(1000))  # 10,000 bytes
    for at in range(0, len(raw), 4000):
        scene.worker.send(lease, at, raw[at:at + 4000])
    marker = b"[ql3: 6000 bytes left out]\n"
    obj = raw[:2000] + marker + raw[8000:]
    done = scene.worker.complete(lease, body=obj, layout={
        "raw_bytes": 10000, "head_bytes": 2000, "tail_offset": 8000})
    assert done.status_code == 200, done.text
    r = raw_read(scene.url, scene.viewer, lease.attempt_id, offset=1990)
    assert (r.content, r.headers["QL3-Log-Next"]) == (raw[1990:2000], "2000")
    r = raw_read(scene.url, scene.viewer, lease.attempt_id, offset=2000)
    assert (r.headers["QL3-Log-Offset"], r.headers["QL3-Log-Gap"]) == ("8000", "6000")
    assert r.content == raw[8000:] and r.headers["QL3-Log-State"] == "complete"
    body, gaps = read_all_raw(scene.url, scene.viewer, lease.attempt_id)
    assert body == raw[:2000] + raw[8000:] and gaps == [(2000, 6000)]


def test_a_chunk_answer_lost_on_the_wire_is_acknowledged_once(scene: Scene) -> None:
    lease = scene.leased()
    proxy = LoopbackProxy(scene.url)
    via = httpx.Client(base_url=proxy.url, timeout=30,
                       headers={"Authorization": f"Bearer {scene.worker_token}"})
    try:
        proxy.drop_response("/v1/worker/log-chunk", 1)
        with pytest.raises(httpx.TransportError):
            scene.worker.send(lease, 0, b"exactly once\n", http=via)
        resend = scene.worker.send(lease, 0, b"exactly once\n", http=via)
        assert resend["results"][0] == {"attempt_id": lease.attempt_id, "status": 200,
                                        "end": 13, "replayed": True}
        nxt = scene.worker.send(lease, 13, b"next\n", http=via)
        assert nxt["results"][0]["end"] == 18
    finally:
        via.close()
        proxy.close()
    records = proxy.records("/v1/worker/log-chunk")
    assert [r["dropped"] for r in records] == [True, False, False]
    r = raw_read(scene.url, scene.viewer, lease.attempt_id, offset=0)
    assert r.content == b"exactly once\nnext\n"
    assert scene.rows(lease.attempt_id) == 2


def test_a_long_poll_wakes_on_a_chunk_sent_to_another_replica(cluster: Cluster) -> None:
    scene = Scene(cluster, replicas=2)
    try:
        _long_poll_across_replicas(scene)
    finally:
        scene.close()


def _long_poll_across_replicas(scene: Scene) -> None:
    lease = scene.leased()
    scene.worker.send(lease, 0, b"one\n")
    other = str(scene.controls[1].url)
    assert wait_for(lambda: scene.one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ql3-listen:c2'"
        # the session LISTENs on ql3_log first, then on ql3_claimable (claims that wait):
        # either as its last statement means ql3_log is listened to
        " AND query LIKE 'LISTEN ql3_%%' AND datname = current_database()") == 1, 10), \
        "c2 keeps no LISTEN session"
    answers: list[httpx.Response] = []
    poll = threading.Thread(target=lambda: answers.append(
        raw_read(other, scene.viewer, lease.attempt_id, offset=4, wait=20)))
    poll.start()
    # the poll is parked on c2 (it answered nothing yet) before c1 stores the chunk
    assert wait_for(lambda: scene.one(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'ql3-listen:c2'"
        " AND datname = current_database()") == 1 and poll.is_alive(), 5)
    scene.worker.send(lease, 4, b"two\n")
    poll.join(25)
    assert not poll.is_alive() and len(answers) == 1
    r = answers[0]
    assert r.status_code == 200 and r.content == b"two\n"
    assert (r.headers["QL3-Log-Offset"], r.headers["QL3-Log-Next"]) == ("4", "8")


def test_follow_streams_events_and_ends_with_the_attempts_status(scene: Scene) -> None:
    lease = scene.leased()
    scene.worker.send(lease, 0, "第一行\n".encode())
    got: list[list[dict[str, Any]]] = []
    reader = threading.Thread(target=lambda: got.append(
        sse_events(scene.url, scene.viewer, lease.attempt_id)))
    reader.start()
    scene.worker.send(lease, 10, b"\xffsecond\n")
    done = scene.worker.complete(lease, outcome="failed")
    assert done.status_code == 200, done.text
    reader.join(30)
    [events] = got
    data = [e for e in events if "event" not in e]
    assert "".join(e["data"]["t"] for e in data) == "第一行\n\ufffdsecond\n"
    assert data[-1]["id"] == 18
    end = events[-1]
    assert end["event"] == "end" and end["data"]["status"] == "failed"
    assert end["data"]["exit_code"] == 1 and end["data"]["partial"] is True


def test_the_window_keeps_the_head_and_the_latest_bytes_and_counts_the_middle(
        scene: Scene) -> None:
    lease = scene.leased()
    raw = b"".join(b"%011d\n" % i for i in range(800_000))  # 9.6 MB of numbered lines
    with scene.worker.kept_alive(lease):
        for at in range(0, len(raw), 65536):
            result = scene.worker.send(lease, at, raw[at:at + 65536])["results"][0]
            assert result["status"] == 200, result
    window = scene.one("SELECT log_window_bytes FROM attempts WHERE id = %s",
                       lease.attempt_id)
    held = scene.one("SELECT sum(length(data)) FROM attempt_log_chunks WHERE attempt_id = %s",
                     lease.attempt_id)
    assert window == held and window <= 8 * 1024 * 1024
    [(gap_start, gap_end)] = scene.db.execute(
        "SELECT start_offset, end_offset FROM attempt_log_chunks WHERE attempt_id = %s"
        " AND gap", (lease.attempt_id,)).fetchall()
    assert gap_start == 1024 * 1024  # the head: every row that starts in the first MiB
    body, gaps = _read_until(scene, lease.attempt_id, len(raw))
    assert gaps == [(gap_start, gap_end - gap_start)]
    assert body == raw[:gap_start] + raw[gap_end:]


def test_a_revoked_token_ends_a_follow_at_its_next_heartbeat(scene: Scene) -> None:
    lease = scene.leased()
    scene.worker.send(lease, 0, b"watch me\n")
    with scene.cluster.api(scene.url, scene.admin) as api, scene.worker.kept_alive(lease):
        issued = api.post("/v1/tokens", json={"name": "watcher", "scope": "viewer"}).json()
        events: list[dict[str, Any]] = []
        reader = threading.Thread(target=sse_events, args=(
            scene.url, issued["token"], lease.attempt_id), kwargs={"sink": events,
                                                                   "timeout_s": 60})
        reader.start()
        assert wait_for(lambda: len(events) >= 1, 20), "the follow never started"
        assert api.post(f"/v1/tokens/{issued['id']}/revoke").status_code == 200
        reader.join(40)  # the heartbeat comes within 15 s of the last output
    assert not reader.is_alive()
    assert events[0]["data"] == {"o": 0, "t": "watch me\n"}
    assert events[-1] == {"event": "error", "data": {"code": "unauthenticated"}}


def test_a_draining_replica_ends_follows_with_a_retry_hint(scene: Scene) -> None:
    import signal

    lease = scene.leased()
    scene.worker.send(lease, 0, b"still running\n")
    events: list[dict[str, Any]] = []
    reader = threading.Thread(target=sse_events, args=(
        scene.url, scene.viewer, lease.attempt_id), kwargs={"sink": events, "timeout_s": 60})
    with scene.worker.kept_alive(lease):
        reader.start()
        assert wait_for(lambda: len(events) >= 1, 20), "the follow never started"
        scene.controls[0].popen.send_signal(signal.SIGTERM)
        reader.join(30)
    reader.join(30)
    assert not reader.is_alive()
    assert events[-1] == {"retry": 1000}
    assert scene.controls[0].popen.wait(30) == 0


def test_an_attempt_lost_before_any_output_reads_as_empty_and_complete(scene: Scene) -> None:
    lease = scene.leased()
    assert wait_for(lambda: scene.one("SELECT status FROM attempts WHERE id = %s",
                                      lease.attempt_id) == "lost", 30), "never lost"
    r = raw_read(scene.url, scene.viewer, lease.attempt_id, offset=0, wait=5)
    assert (r.status_code, r.content) == (200, b"")
    assert (r.headers["QL3-Log-State"], r.headers["QL3-Log-Partial"],
            r.headers["QL3-Attempt-Status"], r.headers["QL3-Log-Next"]) == (
        "complete", "1", "lost", "0")
    events = sse_events(scene.url, scene.viewer, lease.attempt_id)
    assert [e.get("event") for e in events] == ["end"]
    assert events[0]["data"]["status"] == "lost" and events[0]["data"]["partial"] is True
    whole = httpx.get(f"{scene.url}/v1/attempts/{lease.attempt_id}/log",
                      headers={"Authorization": f"Bearer {scene.viewer}"})
    assert (whole.status_code, whole.json()["error"]["code"]) == (404, "log_not_found")
