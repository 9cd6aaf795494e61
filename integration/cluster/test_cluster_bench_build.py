"""``bench/dispatch.py --build NAME=PYTHON``: every step of a batch that touches the database
goes through that build's own ``ql3`` — the migrate that makes the batch's database, the
tokens and ``control serve`` — so a build at another migration count than this checkout
gets a schema its own migrations made (bench/README.md, "`dispatch.py`").

The build here is this checkout's ``ql3`` behind a recorder that writes each call's first
two words to a file: the test reads which calls went through it, and the batch's run
numbers come back exactly 1..N (the serve behind the recorder made them)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

from dispatch_ours import run_enqueue  # noqa: E402

_RECORDER = (
    "import sys; open({log!r}, 'a').write(' '.join(sys.argv[1:3]) + '\\n'); "
    "sys.argv = ['ql3', *sys.argv[1:]]; "
    "from qinglong.local.app.cli import entry; entry()")


@pytest.mark.timeout(120)
def test_enqueue_batch_of_a_build_migrates_issues_tokens_and_serves_through_it(
        tmp_path: Path, cluster_moto: str) -> None:
    log = tmp_path / "calls.txt"
    command = [sys.executable, "-c", _RECORDER.format(log=str(log))]
    result = run_enqueue(tmp_path / "batch", cluster_moto, replicas=1, runs=6, threads=2,
                         command=command)
    assert result.problems == ()
    assert result.runs == 6
    calls = log.read_text().splitlines()
    assert calls.count("control migrate") == 1
    assert calls.count("control token") == 2  # the operator's and the admin's
    assert calls.count("control serve") == 1
