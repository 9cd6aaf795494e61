"""The S3 tier's processes, shared by its fixtures and by the cluster benches: moto's server
and our fault proxy (``fault_proxy.py``), each a subprocess on a free loopback port, with the
helpers that start and stop them. Imported as a plain module (no pytest).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CREDS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


def aws_env(credentials: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus ``AWS_*`` credentials and region, for ``ql3`` children
    that build their own boto3 client."""
    creds = credentials or CREDS
    return dict(os.environ, AWS_ACCESS_KEY_ID=creds["aws_access_key_id"],
                AWS_SECRET_ACCESS_KEY=creds["aws_secret_access_key"],
                AWS_DEFAULT_REGION="us-east-1")


def new_bucket(client: Any, versioned: bool) -> str:
    """Create a fresh ``ql3-<random>`` bucket (versioning enabled when asked); its name."""
    name = f"ql3-{uuid.uuid4().hex[:20]}"
    client.create_bucket(Bucket=name)
    if versioned:
        client.put_bucket_versioning(Bucket=name,
                                     VersioningConfiguration={"Status": "Enabled"})
    return name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_port(port: int, proc: subprocess.Popen[bytes], deadline_s: float) -> None:
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


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@contextmanager
def moto_server() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a ``python -m moto.server`` process, stopped on exit."""
    port = free_port()
    env = dict(os.environ, PYTHONWARNINGS="ignore", **{k.upper(): v for k, v in CREDS.items()})
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        wait_port(port, proc, 60)  # python -m moto.server imports for seconds under load
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(proc)


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
                stop_process(self.proc)
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
        stop_process(self.proc)
