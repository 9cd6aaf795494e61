"""ADR-0069's edge memory gate through the real `ql3 local serve` (docs/operations.md).

An edge data directory with 100 tasks, `serve` idle: its resident set over a bare
interpreter (``python -c`` sleeping, same venv, measured in the same run) stays within
16 MiB. RSS is a size, not a timing, so it is asserted here as the install gate is
(integration/test_small_install.py); bench/footprint.py prints the figure against the
12 MiB goal. The shared libraries a feature needs only when used (ssl/libcrypto for a
webhook, bz2 and lzma for archives) are not mapped by an idle serve: notifications go out
from a child process (local/app/notify_child.py).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import Ql3, wait_for
from qinglong.local.storage.migrations import open_database
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.shared.domain import Task
from qinglong.shared.ids import uuid7

pytestmark = pytest.mark.integration

GATE_MIB = 16.0
NOT_MAPPED = ("libssl", "libcrypto", "_ssl.", "_hashlib.", "libbz2", "_bz2.", "liblzma",
              "_lzma.")


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _mapped(pid: int) -> set[str]:
    with open(f"/proc/{pid}/maps") as fh:
        return {line.split()[-1] for line in fh if "/" in line}


def _settled_rss_kib(pid: int, timeout: float = 20) -> int:
    """The RSS once two samples 0.5 s apart agree within 64 KiB (start-up has settled)."""
    last = [_rss_kib(pid)]

    def steady() -> bool:
        now = _rss_kib(pid)
        same = abs(now - last[0]) <= 64
        last[0] = now
        return same

    wait_for(steady, timeout, interval=0.5)
    return last[0]


def test_idle_edge_serve_with_100_tasks_stays_within_16_mib_over_a_bare_interpreter(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--profile", "edge")
    db = open_database(str(data / "ql3.db"))
    repo = LocalRunRepository(db)
    for n in range(100):  # nothing due during the window (minute 59 / 04:00)
        repo.create_task(Task(id=uuid7(), name=f"任务{n:03d}", argv=("true",),
                              schedule="59 * * * *" if n % 2 else "0 4 * * *"))
    db.close()
    serve = ql3.start_serve()
    bare = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                            env=ql3.env)
    try:
        time.sleep(1)  # bare has started; serve is answering (start_serve waited)
        serve_kib = _settled_rss_kib(serve.pid)
        bare_kib = _settled_rss_kib(bare.pid)
        mapped = _mapped(serve.pid)
    finally:
        bare.kill()
        bare.wait()
        assert Ql3.stop_serve(serve) == 0
    over = (serve_kib - bare_kib) / 1024
    assert over <= GATE_MIB, (
        f"idle serve {serve_kib / 1024:.1f} MiB is {over:.1f} MiB over a bare interpreter "
        f"({bare_kib / 1024:.1f} MiB); ADR-0069's gate is {GATE_MIB} MiB")
    loaded = sorted(p for p in mapped if any(name in Path(p).name for name in NOT_MAPPED))
    assert loaded == [], f"idle serve mapped {[Path(p).name for p in loaded]}"
