"""Following a log over Server-Sent Events resumes exactly (docs/protocols.md §4.4
"Following", §4.9 "Offsets and gaps"): a property test through a real ``ql3 control serve``.

For a 10-chunk log (text with multi-byte characters and ``\\r``; some chunks ``skipped`` past
the end, leaving gaps), a client reconnecting with ``Last-Event-ID`` at every offset, before
and after completion (the final object complete, or capped with a layout), gets every
servable byte from that offset exactly once, contiguous, with each gap announced once.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from cluster_kit import Cluster
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from live_log_kit import ScriptedWorker, manual_task, sse_events

pytestmark = pytest.mark.integration

CHUNK = st.tuples(st.text(alphabet="ab中\n\r", min_size=1, max_size=6),
                  st.integers(min_value=0, max_value=3))  # (text, bytes skipped before it)


def _expected(segments: list[tuple[int, int, bytes | None]], k: int,
              end: int) -> tuple[str, list[tuple[int, int]]]:
    """(text, gaps as (offset, bytes)) a follower from raw offset ``k`` must see."""
    text, gaps, run = [], [], bytearray()
    for start, stop, data in segments:
        if stop <= k:
            continue
        lo = max(start, k)
        if data is None:
            text.append(run.decode("utf-8", "replace"))
            run = bytearray()
            gaps.append((lo, stop - lo))
        else:
            run += data[lo - start:]
    text.append(run.decode("utf-8", "replace"))
    assert end >= k
    return "".join(text), gaps


def _check(events: list[dict[str, Any]], k: int, end: int, want: tuple[str, list[Any]],
           *, final: bool) -> None:
    at, text, gaps = k, [], []
    for e in events:
        if e.get("event") == "end":
            assert final and at == end
            continue
        if e.get("event") == "gap":
            assert e["data"]["o"] == at, (k, e)
            gaps.append((e["data"]["o"], e["data"]["n"]))
            at = e["data"]["o"] + e["data"]["n"]
            assert e["id"] == at
            continue
        assert e["data"]["o"] == at, (k, e)  # contiguous: no byte twice, none missed
        text.append(e["data"]["t"])
        at = e["id"]
    assert at == end, (k, events)
    assert ("".join(text), gaps) == want, k
    if final:
        assert events[-1].get("event") == "end"


GAPPED = [("ab\n", 0), ("中中", 0), ("\ra", 2), ("b中\n", 0), ("a", 0), ("\r\r", 3),
          ("中", 0), ("ab", 0), ("\n", 1), ("a中b", 0)]


def test_reconnecting_at_every_offset_gets_the_log_exactly_once(cluster: Cluster) -> None:
    control = cluster.start_control("c1", lease_ms=60_000, heartbeat_ms=10_000)
    url = str(control.url)
    admin, viewer = cluster.token("admin"), cluster.token("viewer")
    worker = ScriptedWorker(url, cluster.token("worker", pool="default", labels="zone=a"))
    http = httpx.Client()  # one client; every reconnect below is a request of its own

    @settings(max_examples=4, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @example(chunks=GAPPED, capped=True)
    @given(chunks=st.lists(CHUNK, min_size=10, max_size=10), capped=st.booleans())
    def reconnects(chunks: list[tuple[str, int]], capped: bool) -> None:
        manual_task(cluster, url, admin)
        lease = worker.claim()
        raw, live = bytearray(), []  # live: (start, stop, bytes or None for a gap)
        for text, skip in chunks:
            if skip:
                live.append((len(raw), len(raw) + skip, None))
                raw += b"~" * skip  # written by the task, not streamed: in the object only
            data = text.encode()
            answer = worker.send(lease, len(raw), data, skipped=bool(skip))
            assert answer["results"][0]["status"] == 200
            live.append((len(raw), len(raw) + len(data), data))
            raw += data
        end = len(raw)
        for k in range(end):
            events = sse_events(url, viewer, lease.attempt_id, last_event_id=k, until=end,
                                client=http)
            _check(events, k, end, _expected(live, k, end), final=False)
        layout = None
        body = bytes(raw)
        final: list[tuple[int, int, bytes | None]] = [(0, end, body)]
        if capped:
            head, tail_at = end // 3, 2 * end // 3
            layout = {"raw_bytes": end, "head_bytes": head, "tail_offset": tail_at}
            body = body[:head] + b"[ql3: cut]\n" + body[tail_at:]
            final = [(0, head, bytes(raw[:head])), (head, tail_at, None),
                     (tail_at, end, bytes(raw[tail_at:]))]
            final = [s for s in final if s[1] > s[0]]
        done = worker.complete(lease, body=body, layout=layout)
        assert done.status_code == 200, done.text
        for k in range(end + 1):
            events = sse_events(url, viewer, lease.attempt_id, last_event_id=k, client=http)
            _check(events, k, end, _expected(final, k, end), final=True)

    try:
        reconnects()
    finally:
        worker.http.close()
        http.close()


def test_a_complete_log_ending_in_a_cut_character_ends_at_its_end(cluster: Cluster) -> None:
    """The stored log (no live chunk streamed) is exactly one event's size (64 KiB) and
    ends inside a character: the follower gets every byte (the cut character as U+FFFD)
    and the ``end`` event's id is the log's size, never short of the cut."""
    size = 64 * 1024
    control = cluster.start_control("c1", lease_ms=60_000, heartbeat_ms=10_000)
    url = str(control.url)
    admin, viewer = cluster.token("admin"), cluster.token("viewer")
    worker = ScriptedWorker(url, cluster.token("worker", pool="default", labels="zone=a"))
    try:
        manual_task(cluster, url, admin, name="签到-截断")
        lease = worker.claim()
        cut = "中".encode()[:2]
        whole = (size - len(cut)) // 3 - 40  # whole characters, then ASCII lines
        body = ("中" * whole).encode() + b"ab\n" * 13 + b"a" * (size - len(cut) - 3 * whole
                                                               - 39) + cut
        assert len(body) == size
        done = worker.complete(lease, body=body)
        assert done.status_code == 200, done.text
        events = sse_events(url, viewer, lease.attempt_id)
        end = len(body)
        _check(events, 0, end, (body.decode("utf-8", "replace"), []), final=True)
        assert events[-1]["id"] == end
    finally:
        worker.http.close()
