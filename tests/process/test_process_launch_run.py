"""Launch success paths: receipts, exit codes, output, environment (docs/protocols.md §3.2–§3.3)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
from process_testkit import Env, file_mode, wait_until

from qinglong.local.process.launched import LaunchStateError
from qinglong.local.process.launcher import LocalProcessLauncher
from qinglong.local.process.wrapper_image import sealed_memfd
from qinglong.shared.errors import ValidationError
from qinglong.shared.receipts import CompletionReceipt, ReceiptOutcome

pytestmark = pytest.mark.integration


def run(ctx: Env, argv: tuple[str, ...], **overrides: object) -> tuple[int, CompletionReceipt]:
    """Launch, open the gate, wait; the wrapper's status and the published receipt."""
    launcher = ctx.launcher()
    request = ctx.request(argv=argv, **overrides)
    with launcher.start(request) as proc:
        assert proc.open_gate() is True
        code = proc.wait(10)
        assert code is not None
        receipt = launcher.store.read(request.attempt_id)
        assert receipt is not None
        assert receipt.handle == proc.handle
        assert receipt.run_id == request.run_id
    return code, receipt


def test_success_publishes_private_receipt_and_output(env: Env) -> None:
    launcher = env.launcher()
    request = env.request(argv=("sh", "-c", f"echo out; echo err >&2; touch {env.marker}"))
    before = int(time.time() * 1000)
    with launcher.start(request) as proc:
        assert proc.receipt_path == launcher.store.receipt_path(request.attempt_id)
        assert proc.lock_path == launcher.store.lock_path(request.attempt_id)
        assert proc.output_path == request.output_path
        assert proc.handle.pgid == proc.pid
        assert not env.marker.exists(), "the gate holds user code back"
        proc.open_gate()
        assert proc.wait(10) == 0
        assert proc.returncode == 0
    receipt = launcher.store.read(request.attempt_id)
    assert receipt is not None
    assert (receipt.outcome, receipt.exit_code, receipt.signal) == (ReceiptOutcome.EXITED, 0, None)
    assert before <= receipt.finished_at_ms <= int(time.time() * 1000)
    assert env.marker.exists()
    output = Path(request.output_path)
    assert output.read_text() == "out\nerr\n"
    assert file_mode(output) == 0o600
    assert file_mode(output.parent) == 0o700
    assert file_mode(proc.receipt_path) == 0o600
    assert file_mode(os.path.dirname(proc.receipt_path)) == 0o700
    assert file_mode(env.receipt_root) == 0o700
    names = sorted(os.listdir(os.path.dirname(proc.receipt_path)))
    assert names == [f"{request.attempt_id}.lock", f"{request.attempt_id}.receipt"]


@pytest.mark.parametrize(
    ("script", "status", "outcome", "code", "sig"),
    [
        ("exit 3", 3, ReceiptOutcome.EXITED, 3, None),
        ("kill -KILL $$", 128 + 9, ReceiptOutcome.SIGNALED, None, 9),
        ("kill -TERM $$", 128 + 15, ReceiptOutcome.SIGNALED, None, 15),
    ],
)
def test_exit_codes_and_signal_deaths(
    env: Env, script: str, status: int, outcome: ReceiptOutcome, code: int | None, sig: int | None
) -> None:
    wrapper_status, receipt = run(env, ("sh", "-c", script))
    assert wrapper_status == status
    assert (receipt.outcome, receipt.exit_code, receipt.signal) == (outcome, code, sig)


def test_exec_failures_exit_like_a_shell(env: Env) -> None:
    status, receipt = run(env, ("no-such-command-ql3",))
    assert (status, receipt.outcome, receipt.exit_code) == (127, ReceiptOutcome.EXITED, 127)
    script = env.tmp / "not-executable.sh"
    script.write_text("#!/bin/sh\ntouch marker\n")
    script.chmod(0o644)
    status, receipt = run(env, (str(script),))
    assert (status, receipt.exit_code) == (126, 126)
    assert not env.marker.exists()


def test_user_command_sees_exactly_the_given_environment(env: Env) -> None:
    given = {"PATH": os.environ["PATH"], "FOO": "bar baz", "EMPTY": ""}
    status, _ = run(env, ("env",), env=given)
    assert status == 0
    lines = Path(env.request().output_path).read_text().splitlines()
    assert sorted(lines) == sorted(f"{k}={v}" for k, v in given.items())
    os.unlink(env.request().output_path)
    run(env, ("env",), env={**given, "LC_CTYPE": "C"})
    lines = Path(env.request().output_path).read_text().splitlines()
    assert "LC_CTYPE=C" in lines
    assert not [line for line in lines if line.startswith("QL3_")]


def test_user_command_starts_clean(env: Env) -> None:
    script = (
        "grep -E '^Sig(Blk|Ign)' /proc/self/status; for f in /proc/$$/fd/*; do readlink $f; done"
    )
    status, _ = run(env, ("sh", "-c", script))
    assert status == 0
    lines = Path(env.request().output_path).read_text().splitlines()
    masks = dict(line.split(":\t") for line in lines[:2])
    assert int(masks["SigBlk"], 16) == 0
    assert int(masks["SigIgn"], 16) & 0x7FFFFFFF == 0, "signals 1-31 have default dispositions"
    fds = lines[2:]
    assert fds[0] == "/dev/null"
    assert not [fd for fd in fds if fd.startswith(("pipe:", "/memfd:", "memfd:"))]
    assert len([fd for fd in fds if fd.endswith(".lock")]) == 1


def test_an_existing_receipt_is_never_overwritten(env: Env) -> None:
    launcher = env.launcher()
    request = env.request(argv=("sh", "-c", "exit 3"))
    with launcher.start(request) as proc:
        Path(proc.receipt_path).write_bytes(b"first")
        proc.open_gate()
        assert proc.wait(10) == 3, "a failed publication keeps the user's exit code"
    assert Path(proc.receipt_path).read_bytes() == b"first"
    assert sorted(os.listdir(os.path.dirname(proc.receipt_path))) == [
        f"{request.attempt_id}.lock",
        f"{request.attempt_id}.receipt",
    ]


def test_sealed_memfd_refuses_writes() -> None:
    fd = sealed_memfd(b"print('verified')\n")
    try:
        for attempt in (
            lambda: os.write(fd, b"x"),
            lambda: os.pwrite(fd, b"x", 0),
            lambda: os.ftruncate(fd, 0),
            lambda: os.ftruncate(fd, 1 << 20),
        ):
            with pytest.raises(PermissionError) as info:
                attempt()
            assert info.value.errno == errno.EPERM
        assert Path(f"/proc/self/fd/{fd}").read_bytes() == b"print('verified')\n"
    finally:
        os.close(fd)


@pytest.mark.parametrize("how", ["in_place", "renamed"])
def test_replacing_the_wrapper_after_the_check_changes_nothing(env: Env, how: str) -> None:
    copy = env.tmp / "wrapper.py"
    copy.write_bytes(Path(env.config().wrapper_path).read_bytes())
    evil = env.tmp / "evil-ran"
    payload = f"open({str(evil)!r}, 'w').close()\n".encode()

    def replace() -> None:  # runs at step 4, after the digest check, before the spawn
        if how == "in_place":
            with open(copy, "r+b") as fh:
                fh.write(payload)
                fh.truncate()
        else:
            (env.tmp / "new.py").write_bytes(payload)
            os.replace(env.tmp / "new.py", copy)

    env.journal.hook = replace
    launcher = LocalProcessLauncher(env.config(wrapper_path=str(copy)), env.journal)
    request = env.request()
    with launcher.start(request) as proc:
        proc.open_gate()
        assert proc.wait(10) == 0
    assert copy.read_bytes() == payload
    assert not evil.exists()
    assert env.marker.exists()
    receipt = launcher.store.read(request.attempt_id)
    assert receipt is not None
    assert receipt.outcome is ReceiptOutcome.EXITED


def test_misuse_is_refused(env: Env) -> None:
    proc = env.launcher().start(env.request())
    proc.open_gate()
    with pytest.raises(LaunchStateError):
        proc.open_gate()
    with pytest.raises(ValidationError):
        proc.send_graceful(9)
    assert proc.wait(10) == 0
    proc.close()
    proc.close()
    with pytest.raises(LaunchStateError):
        proc.send_graceful(15)
    with pytest.raises(LaunchStateError):
        proc.kill_group()
    assert proc.wait(0) == 0, "the status stays known after close"


def test_wrapper_memory_stays_small(env: Env) -> None:
    launcher = env.launcher()
    request = env.request()
    with launcher.start(request) as proc:
        assert wait_until(lambda: launcher.store.lock_held(request.attempt_id))
        with open(f"/proc/{proc.pid}/status", encoding="ascii") as fh:
            rss_kib = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:"))
        proc.abandon_gate()
        assert proc.wait(10) == 125
    assert rss_kib < 16 * 1024, f"wrapper RSS {rss_kib} KiB"
