"""The per-attempt log size cap (issue 3 item 6): the wrapper keeps at most the cap and then
one marker line, the command runs to its end, and its exit code is kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from process_testkit import Env

from qinglong.shared.receipts import ReceiptOutcome

pytestmark = pytest.mark.integration

CAP = 1000


def _run(env: Env, script: str, cap: int = CAP) -> tuple[bytes, int]:
    launcher = env.launcher(log_cap_bytes=cap)
    request = env.request(argv=("sh", "-c", script))
    with launcher.start(request) as proc:
        proc.open_gate()
        code = proc.wait(20)
    assert code is not None
    return Path(request.output_path).read_bytes(), code


def test_output_beyond_the_cap_is_cut_with_one_marker_and_the_command_finishes(
    env: Env,
) -> None:
    data, code = _run(env, f"head -c 50000 /dev/zero | tr '\\0' x; echo done >&2; "
                           f"touch {env.marker}; exit 4")
    assert code == 4
    assert data == b"x" * CAP + b"\n[ql3: output cut at 1000 bytes]\n"
    assert env.marker.exists(), "the command ran to its end although its output was cut"


def test_output_under_the_cap_is_kept_whole_and_in_order(env: Env) -> None:
    data, code = _run(env, "echo one; echo two >&2; echo three")
    assert (data, code) == (b"one\ntwo\nthree\n", 0)


def test_exactly_the_cap_is_kept_without_a_marker(env: Env) -> None:
    data, _ = _run(env, f"head -c {CAP} /dev/zero | tr '\\0' y")
    assert data == b"y" * CAP


def test_a_background_writer_cannot_keep_the_attempt_open(env: Env) -> None:
    launcher = env.launcher(log_cap_bytes=CAP)
    request = env.request(argv=("sh", "-c", "(while :; do echo spam; done) & exit 0"))
    with launcher.start(request) as proc:
        proc.open_gate()
        assert proc.wait(10) == 0, "the wrapper waited for a background writer"
        proc.kill_group()
    receipt = launcher.store.read(request.attempt_id)
    assert receipt is not None and receipt.outcome is ReceiptOutcome.EXITED
    assert len(Path(request.output_path).read_bytes()) <= CAP + 64
