"""Push channels of the cluster through the real ``ql3 cluster``, real control, a real worker,
PostgreSQL and moto, with a local receiver standing in for the Bark server and a JSON webhook
(nothing leaves the machine; docs/protocols.md §4.5 "Push channels").

A failed run reaches both channels with its stable notification id; each outcome is a run
event naming the channel by scheme and host; the channel URL (a secret) is in no answer,
output or log; ``notify test`` sends a sample; a viewer or operator cannot manage channels.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_kit import Cluster, wait_for
from test_cluster_cli import cli, runs_json, started_cluster

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
DEVICE_KEY = "DevKey9clusterSecret"


@pytest.fixture
def receiver() -> Iterator[tuple[int, list[tuple[str, dict[str, Any]]]]]:
    posts: list[tuple[str, dict[str, Any]]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            posts.append((self.path, json.loads(body or b"{}")))
            reply = b'{"code": 200, "message": "success"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], posts
    server.shutdown()
    server.server_close()


def test_a_failed_run_reaches_bark_and_a_webhook_through_ql3_cluster(
    cluster: Cluster, receiver: tuple[int, list[tuple[str, dict[str, Any]]]]
) -> None:
    port, posts = receiver
    urls, tokens = started_cluster(cluster, replicas=1)
    url, admin = urls[0], tokens["admin"]
    bark = f"bark://127.0.0.1:{port}/{DEVICE_KEY}"
    added = cli(cluster, url, admin, "notify", "add", stdin=bark)
    assert f"bark://127.0.0.1:{port}/…" in added.stdout and DEVICE_KEY not in added.stdout
    cli(cluster, url, admin, "notify", "add", "--on", "failed,succeeded",
        stdin=f"json://127.0.0.1:{port}/hook/{DEVICE_KEY}")
    listed = cli(cluster, url, admin, "notify", "list").stdout
    assert "json://127.0.0.1" in listed and DEVICE_KEY not in listed
    for scope in ("viewer", "operator"):
        refused = cli(cluster, url, tokens[scope], "notify", "list", code=None)
        assert refused.returncode != 0 and "admin" in refused.stderr

    tested = cli(cluster, url, admin, "notify", "test")
    assert tested.stdout.count(": ok") == 2
    assert wait_for(lambda: len(posts) >= 2, 10)
    posts.clear()

    cli(cluster, url, admin, "task", "add", "jd_sign", "--schedule", "@once", "--",
        "sh", "-c", "echo 签到失败; exit 3")
    cli(cluster, url, admin, "run", "jd_sign", "--wait", code=None)
    assert runs_json(cluster, url, admin, "jd_sign")[0]["status"] == "failed"
    assert wait_for(lambda: len(posts) >= 2, 30), posts
    bark_doc = next(doc for path, doc in posts if path == "/push")
    hook_doc = next(doc for path, doc in posts if path.startswith("/hook/"))
    assert bark_doc["device_key"] == DEVICE_KEY and "jd_sign#1 failed" in bark_doc["title"]
    assert "notification " in hook_doc["message"]

    def events() -> list[dict[str, Any]]:
        run = json.loads(cli(cluster, url, admin, "inspect", "jd_sign#1", "--json").stdout)
        return [e for e in run["events"] if e["kind"].startswith("notify_")]

    found = wait_for(lambda: len(events()) >= 2 and events(), 20)
    assert found and sorted(e["kind"] for e in found) == ["notify_sent", "notify_sent"]
    shown = json.dumps(found) + listed + "".join(p.log() for p in cluster.procs)
    assert DEVICE_KEY not in shown
