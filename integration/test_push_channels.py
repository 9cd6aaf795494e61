"""Push channels through Apprise (``notify_urls``), through the real `ql3 local`.

A local HTTP receiver stands in for the Bark server and a JSON webhook (``bark://`` and
``json://`` with a loopback host): nothing leaves the machine. The channels are sent by the
notification child, retried with the shared backoff within ``notify_timeout_s``; each
outcome is a run event naming the channel by scheme and host only; a failing channel never
changes a run; an idle or notifying ``serve`` never maps ssl (README "Failure
notifications").
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness import Ql3, wait_for
from test_task_env_secrets import ql3_input

pytestmark = pytest.mark.integration

DEVICE_KEY = "DevKey7secretXYZ"


@dataclass
class Receiver:
    """What the local receiver got: ``(path, JSON body)`` per POST."""

    port: int
    posts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def paths(self) -> list[str]:
        return [p for p, _ in self.posts]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver(0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(size)
            try:
                doc = json.loads(body)
            except ValueError:
                doc = {"raw": body.decode(errors="replace")}
            got.posts.append((self.path, doc))
            reply = b'{"code": 200, "message": "success"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield got
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _set_urls(ql3: Ql3, *urls: str) -> None:
    done = ql3_input(ql3, "\n".join(urls) + "\n", "local", "settings", "set",
                     "notify_urls", "-")
    assert done.returncode == 0, done.stderr


def _events(ql3: Ql3, run_id: str) -> list[dict[str, Any]]:
    """The run's notification events (``--json`` carries ``detail`` as an object)."""
    return [e for e in ql3.json("local", "inspect", run_id)["events"]
            if e["kind"] in ("notify_sent", "notify_failed")]


def test_a_failed_run_reaches_bark_and_a_json_webhook_on_a_local_receiver(
    ql3: Ql3, receiver: Receiver
) -> None:
    bark = f"bark://127.0.0.1:{receiver.port}/{DEVICE_KEY}"
    hook = f"json://127.0.0.1:{receiver.port}/hook/{DEVICE_KEY}"
    _set_urls(ql3, bark, hook)
    shown = ql3.run("local", "settings", "show").stdout
    assert f"bark://127.0.0.1:{receiver.port}/…" in shown and DEVICE_KEY not in shown
    ql3.run("local", "task", "add", "jd_sign", "--schedule", "@once", "--",
            "sh", "-c", "echo 签到失败; exit 3")
    serve = ql3.start_serve()
    try:
        ql3.run("local", "run", "jd_sign", "--wait", check=False)
        assert wait_for(lambda: len(receiver.posts) >= 2, 30), receiver.posts
        run_id = ql3.json("local", "runs", "--task", "jd_sign")[0]["id"]
        events = wait_for(lambda: len(_events(ql3, run_id)) >= 2 and _events(ql3, run_id), 20)
        maps = Path(f"/proc/{serve.pid}/maps").read_text()
    finally:
        assert Ql3.stop_serve(serve) == 0
    assert "libssl" not in maps and "apprise" not in maps  # the child sent them
    bark_posts = [doc for path, doc in receiver.posts if path == "/push"]
    assert bark_posts and bark_posts[0]["device_key"] == DEVICE_KEY
    assert "jd_sign" in bark_posts[0]["title"] and "failed" in bark_posts[0]["title"]
    hook_posts = [doc for path, doc in receiver.posts if path.startswith("/hook/")]
    assert hook_posts and "exit 3" in hook_posts[0]["message"]
    assert sorted((e["kind"], e["detail"]["channel"]) for e in events) == [
        ("notify_sent", "bark"), ("notify_sent", "json")]
    assert ql3.json("local", "runs", "--task", "jd_sign")[0]["status"] == "failed"
    printed = ql3.run("local", "inspect", run_id).stdout + json.dumps(events)
    assert DEVICE_KEY not in printed + ql3.serve_log()


def test_a_failing_channel_is_retried_recorded_and_never_changes_the_run(
    ql3: Ql3, receiver: Receiver
) -> None:
    ql3.run("local", "settings", "set", "notify_timeout_s", "4")
    ql3.run("local", "settings", "set", "notify_on", "failed,succeeded")
    _set_urls(ql3, f"json://127.0.0.1:{_closed_port()}/down",
              f"json://127.0.0.1:{receiver.port}/up")
    ql3.run("local", "task", "add", "ok_task", "--schedule", "@once", "--", "true")
    serve = ql3.start_serve()
    try:
        ql3.run("local", "run", "ok_task", "--wait")
        run_id = ql3.json("local", "runs", "--task", "ok_task")[0]["id"]
        events = wait_for(lambda: len(_events(ql3, run_id)) >= 2 and _events(ql3, run_id), 30)
    finally:
        assert Ql3.stop_serve(serve) == 0
    assert events, "no notification outcome recorded"
    failed = [e for e in events if e["kind"] == "notify_failed"]
    sent = [e for e in events if e["kind"] == "notify_sent"]
    assert len(failed) == 1 and len(sent) == 1
    assert failed[0]["detail"]["tries"] >= 2  # retried with the shared backoff
    assert failed[0]["detail"]["duration_ms"] < 4000 + 1000
    assert receiver.paths() == ["/up"]
    assert ql3.json("local", "runs", "--task", "ok_task")[0]["status"] == "succeeded"


def test_notify_test_sends_through_a_channel_and_urls_never_come_from_argv(
    ql3: Ql3, receiver: Receiver
) -> None:
    refused = ql3.run("local", "settings", "set", "notify_urls",
                      f"bark://127.0.0.1:1/{DEVICE_KEY}", check=False)
    assert refused.returncode == 2 and DEVICE_KEY not in refused.stdout + refused.stderr
    _set_urls(ql3, f"bark://127.0.0.1:{receiver.port}/{DEVICE_KEY}")
    done = ql3.run("local", "notify", "test")
    assert done.stdout.startswith("bark: ok") and DEVICE_KEY not in done.stdout
    assert receiver.paths() == ["/push"]
    assert "[test]" in receiver.posts[0][1]["body"]
