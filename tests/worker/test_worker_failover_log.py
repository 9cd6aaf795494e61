"""The worker's failover between control URLs logs one warning per 30 s, not one per try: an
outage of every replica used to write a line for each request (97 in 70 s)."""

from __future__ import annotations

import logging

import pytest

from qinglong.worker import client as client_module
from qinglong.worker.client import FAILOVER_WARN_EVERY_S, ControlClient


def test_failover_warnings_are_one_per_period_and_count_the_quiet_switches(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    monkeypatch.setattr(client_module.clock, "now", lambda: now[0])
    control = ControlClient(["http://a:1", "http://b:2"], "ql3_" + "t" * 43)
    caplog.set_level(logging.DEBUG, logger="qinglong.worker")
    try:
        for _ in range(10):  # both replicas down: the requests alternate between them
            control._fail_over(control._current, "ConnectError")
            now[0] += 1
        now[0] += FAILOVER_WARN_EVERY_S
        control._fail_over(control._current, "ConnectError")
    finally:
        control.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "control at http://a:1 unreachable (ConnectError); switching to http://b:2",
        "control at http://a:1 unreachable (ConnectError); switching to http://b:2"
        " (9 more switches since the last such line)"]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG
             and "switching to" in r.getMessage()]
    assert len(debug) == 9
