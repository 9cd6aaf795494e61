"""The worker client's route of wire 2 against a scripted control (``httpx.MockTransport``;
docs/protocols.md §4.2 "No output"): ``complete-no-output`` goes with ``QL3-Wire: 2``; a
replica that answers 404 raises ControlRejectedError (status 404) and gets no wire-2 route
for the next 60 s, then is asked again."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

import httpx
import pytest

from qinglong.shared import wire
from qinglong.shared.ids import uuid7
from qinglong.worker import client as client_mod
from qinglong.worker import clock
from qinglong.worker.client import ControlClient
from qinglong.worker.errors import ControlRejectedError


def _lease() -> wire.LeaseRef:
    return wire.LeaseRef(attempt_id=uuid7(), lease_token=str(uuid.uuid4()), lease_version=1)


class Control:
    """Records (path, body, QL3-Wire header); ``older`` answers 404 to the wire-2 route."""

    def __init__(self, older: bool = False) -> None:
        self.seen: list[tuple[str, Any, str | None]] = []
        self.older = older
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        with self.lock:
            self.seen.append((request.url.path, body, request.headers.get("QL3-Wire")))
        if self.older and request.url.path == "/v1/worker/complete-no-output":
            return httpx.Response(404, json={"error": {"code": "not_found"}})
        return httpx.Response(200, json={"ok": True, "replayed": False})


def _report() -> wire.CompletionReport:
    return wire.CompletionReport(lease=_lease(), outcome="succeeded", exit_code=0,
                                 signal=None, log=None)


def test_complete_no_output_is_sent_with_wire_2() -> None:
    control = Control()
    client = ControlClient("http://control", "tok", transport=httpx.MockTransport(control))
    assert client.complete_no_output(_report(), deadline=clock.now() + 10) == wire.Ack()
    assert [(p, h) for p, _, h in control.seen] == [("/v1/worker/complete-no-output", "2")]
    assert control.seen[0][1]["log"] is None
    assert client.v2_routes_ok()


def test_complete_no_output_404_is_a_rejection_that_marks_the_replica_for_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:
    control = Control(older=True)
    client = ControlClient("http://control", "tok", transport=httpx.MockTransport(control))
    with pytest.raises(ControlRejectedError) as caught:
        client.complete_no_output(_report(), deadline=clock.now() + 10)
    assert caught.value.status == 404
    assert not client.v2_routes_ok()
    later = clock.now() + client_mod.V1_RETRY_S + 1
    monkeypatch.setattr(clock, "now", lambda: later)
    assert client.v2_routes_ok()  # asked again after V1_RETRY_S
