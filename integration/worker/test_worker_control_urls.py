"""``--control-url`` mistakes and lists, through the real CLI against the fake control:
a URL ending in /v1 is refused with exit 2 and a hint, before anything is sent; several base
URLs are tried in order and a replica that refuses connections is skipped."""

from __future__ import annotations

import socket

import pytest

pytestmark = pytest.mark.integration


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("suffix", ["/v1", "/v1/"])
def test_control_url_ending_in_v1_is_refused_with_exit_2_and_a_hint(
        control, start_worker, suffix):
    worker = start_worker(control_url=control.url + suffix)
    assert worker.proc.wait(15) == 2, worker.stderr()
    err = worker.stderr()
    assert "give the control base URL, without /v1" in err, err
    assert control.seen("register") == []


def test_v1_anywhere_in_a_list_is_refused(control, start_worker):
    worker = start_worker(control_url=f"{control.url},{control.url}/v1")
    assert worker.proc.wait(15) == 2, worker.stderr()
    assert "without /v1" in worker.stderr()


def test_a_dead_first_replica_is_skipped_and_the_second_takes_every_call(
        control, start_worker):
    dead = f"http://127.0.0.1:{closed_port()}"
    worker = start_worker(control_url=f"{dead},{control.url}")
    control.wait_for("register")
    control.wait_for("claim", count=2)
    assert worker.proc.poll() is None
    err = worker.stderr()
    assert f"control at {dead} unreachable (ConnectError); switching to {control.url}" in err
