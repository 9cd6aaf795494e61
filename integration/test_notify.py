"""Issue 12 item 9 through the real `ql3`: run notifications by command and webhook."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import Ql3, alive_in_group, wait_for
from test_task_env_secrets import LITERAL, ql3_input

pytestmark = pytest.mark.integration


class _Hook(http.server.BaseHTTPRequestHandler):
    bodies: list[dict[str, Any]]

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", "0"))
        type(self).bodies.append(json.loads(self.rfile.read(size)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local HTTP server that records JSON bodies POSTed to it."""
    bodies: list[dict[str, Any]] = []
    handler = type("Hook", (_Hook,), {"bodies": bodies})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook/s3cr3t-path-token", bodies
    server.shutdown()
    server.server_close()


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "push.sh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def _events(ql3: Ql3, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in ql3.json("local", "inspect", run_id)["events"] if e["kind"] == kind]


def test_a_failed_run_notifies_command_and_webhook_with_its_facts_and_no_secret(
    ql3: Ql3, tmp_path: Path, webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    url, bodies = webhook
    seen = tmp_path / "seen.env"
    script = _script(tmp_path, 'env > "$1"')
    ql3.run("local", "settings", "set", "notify_command", f"{script} {seen}")
    assert ql3_input(ql3, url, "local", "settings", "set", "notify_webhook", "-").returncode == 0
    serve = ql3.start_serve()
    try:
        added = ql3_input(ql3, LITERAL, "local", "task", "add", "backup", "--schedule", "@once",
                          "--secret-env", "API", "--", "sh", "-c", 'echo "$API"; exit 3')
        assert added.returncode == 0, added.stderr
        ql3.run("local", "task", "add", "fine", "--schedule", "@once", "--", "true")
        ok = ql3.json("local", "run", "fine", "--wait")
        run = ql3.json("local", "run", "backup", "--wait", check=False)
        assert wait_for(lambda: len(_events(ql3, run["id"], "notify_sent")) == 2, 15)
        settings = ql3.run("local", "settings", "show").stdout
    finally:
        assert ql3.stop_serve(serve) == 0
    assert run["status"] == "failed" and run["exit_code"] == 3
    facts = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert facts["QL3_TASK"] == "backup" and facts["QL3_STATUS"] == "failed"
    assert facts["QL3_RUN_ID"] == run["id"] and facts["QL3_EXIT_CODE"] == "3"
    assert "API" not in facts  # the run's secrets are not the notifier's
    assert [b["run_id"] for b in bodies] == [run["id"]]  # `fine` succeeded: not notified
    assert bodies[0]["status"] == "failed" and bodies[0]["task"] == "backup"
    assert LITERAL not in json.dumps(bodies) and LITERAL not in seen.read_text()
    assert not _events(ql3, ok["id"], "notify_sent")
    assert "s3cr3t-path-token" not in settings + ql3.serve_log()  # a webhook shows by host


def test_a_hung_notifier_is_killed_as_a_group_and_the_run_keeps_its_status(
    ql3: Ql3, tmp_path: Path
) -> None:
    pgid_file = tmp_path / "pgid"
    script = _script(tmp_path, f"ps -o pgid= $$ > {pgid_file}; sleep 60 & sleep 60")
    ql3.run("local", "settings", "set", "notify_command", script)
    ql3.run("local", "settings", "set", "notify_timeout_s", "1")
    ql3.run("local", "settings", "set", "notify_on", "failed,succeeded")
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "quick", "--schedule", "@once", "--", "true")
        run = ql3.json("local", "run", "quick", "--wait")
        failed = wait_for(lambda: _events(ql3, run["id"], "notify_failed"), 15)
        after = ql3.json("local", "inspect", run["id"])
    finally:
        assert ql3.stop_serve(serve) == 0
    assert run["status"] == "succeeded" and after["status"] == "succeeded"
    detail = failed[0]["detail"]
    assert detail["channel"] == "command" and detail["timed_out"] is True
    pgid = int(pgid_file.read_text())
    assert wait_for(lambda: not alive_in_group(pgid), 5), "the notifier's group lives on"


def test_a_failing_notifier_is_recorded_and_changes_nothing_else(
    ql3: Ql3, tmp_path: Path
) -> None:
    ql3.run("local", "settings", "set", "notify_command", _script(tmp_path, "exit 5"))
    serve = ql3.start_serve()
    try:
        ql3.run("local", "task", "add", "bad", "--schedule", "@once", "--", "false")
        run = ql3.json("local", "run", "bad", "--wait", check=False)
        failed = wait_for(lambda: _events(ql3, run["id"], "notify_failed"), 15)
    finally:
        assert ql3.stop_serve(serve) == 0
    assert failed[0]["detail"]["exit_code"] == 5
    assert ql3.json("local", "inspect", run["id"])["status"] == "failed"


def test_notify_test_sends_a_sample_and_says_when_nothing_is_configured(
    ql3: Ql3, tmp_path: Path, webhook: tuple[str, list[dict[str, Any]]]
) -> None:
    nothing = ql3.run("local", "notify", "test", check=False)
    assert nothing.returncode == 1 and "no notifier configured" in nothing.stderr
    url, bodies = webhook
    ql3.run("local", "settings", "set", "notify_webhook", url)
    sent = ql3.run("local", "notify", "test")
    assert sent.stdout.startswith("webhook: ok")
    assert bodies[0]["kind"] == "ql3.test" and bodies[0]["task"] == "ql3-notify-test"
    ql3.run("local", "settings", "set", "notify_webhook", "http://127.0.0.1:9/closed")
    down = ql3.run("local", "notify", "test", check=False)
    assert down.returncode == 1 and "webhook: FAILED" in down.stdout
    assert os.path.basename(url) not in down.stdout + down.stderr


def test_a_negative_setting_is_refused_by_its_range_not_read_as_an_option(ql3: Ql3) -> None:
    """``settings set notify_timeout_s -1``: the value's own range error (exit 2), not
    click's "No such option: -1"; the setting keeps its value."""
    refused = ql3.run("local", "settings", "set", "notify_timeout_s", "-1", check=False)
    assert refused.returncode == 2, refused
    assert refused.stderr == "ql3: error: notify_timeout_s: use a number of seconds from 1 to 25\n"
    assert refused.stdout == ""
    (shown,) = [s for s in ql3.json("local", "settings", "show")
                if s["key"] == "notify_timeout_s"]
    assert shown == {"key": "notify_timeout_s", "value": None, "default": "10"}, shown
