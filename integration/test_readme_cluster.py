"""README "Run the cluster on one machine" as written, run twice in one shell: its first block
(database, moto, tokens, two replicas, two workers, a task, a bundle) then its teardown
("Tear it down"). The second pass must work as the first: the teardown stops every process
and drops the database and the roles. Ports, the database, the roles and the files are made
unique for the test (the text is otherwise unchanged)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.postgres]
ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _section_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Run the cluster on one machine", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def test_the_readme_cluster_section_ends_with_its_teardown_and_runs_twice(
    tmp_path: Path,
) -> None:
    blocks = _section_blocks()
    assert "DROP DATABASE" in blocks[-1] and "kill $(jobs -p)" in blocks[-1]
    tag = uuid.uuid4().hex[:8]
    script = blocks[0] + "\n" + blocks[-1]
    for old, new in (("ql3demo", f"ql3demo_{tag}"), ("ql3_control", f"ql3_control_{tag}"),
                     ("ql3_runtime", f"ql3_runtime_{tag}"), ("/tmp/", f"{tmp_path}/"),
                     ("8081", str(_free_port())), ("8082", str(_free_port())),
                     ("9000", str(_free_port()))):
        script = script.replace(old, new)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QL3_", "AWS_")) and k != "PYTHONPATH"}
    env["QL3_RUNTIME_ROLE"] = f"ql3_runtime_{tag}"
    outputs = []
    try:
        for _ in range(2):
            out = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, text=True,
                                 capture_output=True, timeout=600, check=False)
            outputs.append(out.stdout + out.stderr)
            assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
            assert "hello from" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
            assert "already exists" not in out.stderr, out.stderr[-3000:]
    finally:
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-c",
                        f"DROP DATABASE IF EXISTS ql3demo_{tag}"], check=False,
                       capture_output=True)
        for role in (f"ql3_control_{tag}", f"ql3_runtime_{tag}"):
            subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-c",
                            f"DROP ROLE IF EXISTS {role}"], check=False, capture_output=True)
    left = subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-tAc",
                           f"SELECT count(*) FROM pg_database WHERE datname = 'ql3demo_{tag}'"],
                          capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "0"
