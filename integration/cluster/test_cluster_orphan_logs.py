"""A worker SIGKILLed between its log PUT and its completion leaves an orphan object, which
the orphan sweep collects exactly once (docs/operations.md "Orphan log objects").

Real ``ql3 control serve`` and ``ql3 worker run`` processes, PostgreSQL, moto over HTTP. The
worker talks to control through a loopback proxy of this test that forwards every request
but holds ``/v1/worker/complete``: the worker has uploaded its log by then; the test
SIGKILLs it while the completion is held, control's lease recovery ends the attempt ``lost``
and the sweep (as the runtime role) deletes the object it HEADs.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from cluster_kit import Cluster, free_port, wait_for
from s3_services import CREDS

from qinglong.control.db.engine import create_engine
from qinglong.control.history.orphans import sweep_orphans
from qinglong.control.retention.objects import S3ObjectStore, make_client

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@contextmanager
def holding_proxy(upstream: str) -> Iterator[tuple[str, threading.Event]]:
    """``(url, held)``: forwards to ``upstream``; a POST to ``/v1/worker/complete`` sets
    ``held`` and is never answered (until the proxy stops)."""
    held, stop = threading.Event(), threading.Event()
    client = httpx.Client(base_url=upstream, timeout=30)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.startswith("/v1/worker/complete"):
                held.set()
                stop.wait(60)
                return
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() not in ("host", "content-length", "connection")}
            r = client.request(self.command, self.path, content=body, headers=headers)
            self.send_response(r.status_code)
            for k, v in r.headers.items():
                if k.lower() not in ("content-length", "transfer-encoding", "connection",
                                     "content-encoding"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(r.content)))
            self.end_headers()
            self.wfile.write(r.content)

        do_GET = do_POST = do_PUT = do_DELETE = _forward  # noqa: N815 (http.server names)

        def log_message(self, *_args: Any) -> None:
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", held
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        client.close()


def test_a_worker_killed_between_put_and_complete_leaves_an_orphan_collected_once(
        cluster: Cluster) -> None:
    admin, pool = cluster.token("admin"), cluster.token("worker", pool="p1")
    control = cluster.start_control("c1", lease_ms=3000, heartbeat_ms=1000)
    with cluster.api(control.url or "", admin) as api:
        r = api.post("/v1/tasks", json={"name": "rizhi", "shell": "echo 你好; echo done"})
        assert r.status_code == 201, r.text
        r = api.post("/v1/tasks/rizhi/run")
        assert r.status_code == 201, r.text
        run_id = r.json()["id"]
    s3 = make_client(cluster.s3_endpoint, timeout_s=5, **CREDS)
    with holding_proxy(control.url or "") as (url, held):
        worker = cluster.start_worker("w1", pool, url)
        assert wait_for(held.is_set, 60), worker.log()
        worker.kill()  # SIGKILL while its completion is held
        assert not worker.alive()
    with cluster.db.connect() as conn:
        attempt, project = conn.execute(
            "SELECT a.id::text, r.project_id::text FROM attempts a JOIN runs r"
            " ON r.id = a.run_id WHERE a.run_id = %s", (run_id,)).fetchone() or (None, None)
    key = f"p/{project}/wlog-{attempt}"
    versions = s3.list_object_versions(Bucket=cluster.bucket, Prefix=key).get("Versions", [])
    assert len(versions) == 1  # the worker PUT its log before it asked to complete

    def lost() -> bool:
        with cluster.db.connect() as conn:
            row = conn.execute("SELECT status FROM attempts WHERE id = %s",
                               (attempt,)).fetchone()
        return row is not None and row[0] == "lost"

    assert wait_for(lost, 60), control.log()

    def past_margin() -> bool:  # the sweep looks only at attempts ended > margin_s ago
        with cluster.db.connect() as conn:
            row = conn.execute("SELECT finished_at < now() - interval '0.5 s' FROM attempts"
                               " WHERE id = %s", (attempt,)).fetchone()
        return bool(row and row[0])

    assert wait_for(past_margin, 10), "the lost attempt has no finished_at"
    store = S3ObjectStore(s3, in_transaction=lambda: False)
    engine = create_engine(cluster.db.runtime_url, pool_size=1, max_overflow=0)
    try:
        first = sweep_orphans(engine, store, s3, cluster.bucket, "test/1", margin_s=0.5)
        second = sweep_orphans(engine, store, s3, cluster.bucket, "test/2", margin_s=0.5)
    finally:
        engine.dispose()
    assert first.outcomes == {"deleted": 1}, first
    assert not second.outcomes
    left = s3.list_object_versions(Bucket=cluster.bucket, Prefix=key)
    assert not left.get("Versions") and not left.get("DeleteMarkers")
    with cluster.db.connect() as conn:
        rows = conn.execute("SELECT attempt_id::text, outcome FROM orphan_log_objects"
                            ).fetchall()
    assert rows == [(attempt, "deleted")]
