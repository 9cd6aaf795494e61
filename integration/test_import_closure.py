"""The edge import closure (docs/architecture.md §1): a running `serve` loads no cluster library."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness import Ql3, wait_for

pytestmark = pytest.mark.integration

FORBIDDEN = ("psycopg", "psycopg_pool", "sqlalchemy", "boto3", "botocore", "fastapi", "pydantic",
             # the web panel (docs/panel.md) is `ql3 local web`'s, never serve's
             "starlette", "jinja2", "uvicorn", "multipart", "python_multipart")


@pytest.mark.parametrize("web", [False, True], ids=["serve", "serve-web"])
def test_serve_with_a_run_loads_none_of_the_cluster_libraries(
        ql3: Ql3, tmp_path: Path, web: bool) -> None:
    """With --web too: the panel is serve's child process, which loads it, never serve."""
    ql3.run("local", "task", "add", "hello", "--schedule", "* * * * * *", "--", "echo", "hi")
    err = tmp_path / "importtime.txt"
    out = tmp_path / "stdout.txt"
    extra = ["--web", "--listen", "127.0.0.1:0"] if web else []
    with open(err, "w") as fh, open(out, "w") as out_fh:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-c",
             "from qinglong.local.app.cli import entry; entry()", "local", "serve", *extra],
            env=ql3.env, stdout=out_fh, stderr=fh,
        )
    try:
        assert wait_for((ql3.data_dir / "ql3.sock").exists, 20)
        ran = wait_for(
            lambda: any(r["status"] == "succeeded" for r in ql3.json("local", "runs")), 20
        )
        assert ran, "the serve process did not run the task"
        if web:  # the panel really runs (its link relayed by serve)
            assert wait_for(lambda: "/signin?token=" in out.read_text(), 30), err.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    full = {
        line.rsplit("|", 1)[1].strip()
        for line in err.read_text().splitlines()
        if line.startswith("import time:") and "|" in line
    }
    modules = {name.split(".")[0] for name in full}
    assert "sqlite3" in modules and "click" in modules  # the report is real
    assert sorted(m for m in modules if m in FORBIDDEN) == []
    assert sorted(m for m in full if m.startswith("qinglong.panel")) == []
