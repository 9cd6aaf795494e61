"""Fixtures for the S3 tier: moto's server in a subprocess, our fault proxy in front of it.

``moto_endpoint`` (session): ``python -m moto.server`` on 127.0.0.1 and a free port, stopped at
the end. ``proxy`` (per test): ``fault_proxy.py`` as its own process with a fresh config and
DELETE log; ``proxy.set(...)`` changes faults, ``proxy.deletes()`` reads the log. Every fixture
stops the processes it started.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("moto")

from qinglong.control.retention.objects import make_client

HERE = Path(__file__).resolve().parent
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_port(port: int, proc: subprocess.Popen[bytes], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited early with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} did not open within {deadline_s}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto server process."""
    port = _free_port()
    env = dict(os.environ, PYTHONWARNINGS="ignore", **{k.upper(): v for k, v in CREDS.items()})
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        _wait_port(port, proc, 20)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop(proc)


class FaultProxy:
    """Handle on one running ``fault_proxy.py`` process."""

    def __init__(self, tmp: Path, upstream: str) -> None:
        self.config_path = tmp / "proxy-config.json"
        self.log_path = tmp / "proxy-deletes.jsonl"
        port_file = tmp / "proxy-port"
        self.set()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "fault_proxy.py"), "--upstream",
             upstream.removeprefix("http://"), "--config", str(self.config_path),
             "--log", str(self.log_path), "--port-file", str(port_file)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                _stop(self.proc)
                raise RuntimeError("fault proxy did not start")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def set(self, **faults: Any) -> None:
        """Replace the fault config (latency_ms, strip_if_match, drop_delete_response, fail)."""
        tmp = self.config_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(faults))
        os.replace(tmp, self.config_path)

    def deletes(self) -> list[dict[str, Any]]:
        """Every DELETE the proxy saw, in order."""
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line]

    def stop(self) -> None:
        _stop(self.proc)


@pytest.fixture
def proxy(tmp_path: Path, moto_endpoint: str) -> Iterator[FaultProxy]:
    fp = FaultProxy(tmp_path, moto_endpoint)
    try:
        yield fp
    finally:
        fp.stop()


@pytest.fixture
def s3(proxy: FaultProxy) -> Any:
    """A boto3 client that goes through the proxy (one attempt, path style)."""
    return make_client(proxy.endpoint, timeout_s=5, **CREDS)


@pytest.fixture
def direct_s3(moto_endpoint: str) -> Any:
    """A boto3 client straight to moto (test setup and out-of-band re-uploads)."""
    return make_client(moto_endpoint, timeout_s=5, **CREDS)


@pytest.fixture
def make_bucket(direct_s3: Any) -> Callable[[bool], str]:
    def make(versioned: bool) -> str:
        name = f"ql3-{uuid.uuid4().hex[:20]}"
        direct_s3.create_bucket(Bucket=name)
        if versioned:
            direct_s3.put_bucket_versioning(
                Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        return name

    return make
