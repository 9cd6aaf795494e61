"""Each ADR-0069 §2 launch step fails before any user code runs (docs/protocols.md §3.2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from process_testkit import Env, group_gone

from qinglong.local.process import launcher as launcher_module
from qinglong.local.process.launch_request import (
    DEFAULT_WRAPPER_PATH,
    SINGLE_STRING_MAX_BYTES,
    LaunchLimitError,
)
from qinglong.shared.errors import (
    ConflictError,
    InvalidIdentifierError,
    LaunchError,
    ProcessIdentityError,
    ValidationError,
)
from qinglong.shared.ids import uuid7

SECRET = "hunter2-secret-value"


def assert_nothing_ran(env: Env, *, registered: bool = False) -> None:
    assert env.spawned == [], "nothing may be spawned"
    assert not env.marker.exists(), "user code must not run"
    assert bool(env.journal.calls) is registered


def bad_requests(env: Env) -> list[tuple[str, dict[str, object]]]:
    log = str(env.log_root / "task" / "a.log")
    return [
        ("run_id", {"run_id": "not-a-uuid"}),
        ("attempt_id", {"attempt_id": "6ba7b810-9dad-41d1-80b4-00c04fd430c8"}),
        ("argv", {"argv": ()}),
        ("argv", {"argv": ("touch", "a\0b")}),
        ("argv", {"argv": ("touch", 3)}),
        ("argv", {"argv": ("",)}),
        ("argv", {"argv": "touch"}),
        ("env", {"env": {"BAD-NAME": "x"}}),
        ("env", {"env": {"1X": "x"}}),
        ("env", {"env": {"OK": f"{SECRET}\0"}}),
        ("env", {"env": {"QL3_LAUNCH_GATE_FD": "3"}}),
        ("env", {"env": {"QL3_RECEIPT_DIR": "/tmp"}}),
        ("env", {"env": {"OK": "\udcff\ud800"}}),
        ("env", {"env": ["PATH=/bin"]}),
        ("cwd", {"cwd": "relative/dir"}),
        ("cwd", {"cwd": str(env.tmp / "missing")}),
        ("cwd", {"cwd": str(env.marker.parent / "a-file")}),
        ("output_path", {"output_path": "relative.log"}),
        ("output_path", {"output_path": str(env.tmp / "elsewhere.log")}),
        ("output_path", {"output_path": str(env.log_root)}),
        ("output_path", {"output_path": str(env.log_root / "task" / ".." / "x.log")}),
        ("output_path", {"output_path": log + "\0"}),
    ]


@pytest.mark.integration
def test_step1_validation_rejects_before_touching_anything(env: Env) -> None:
    (env.tmp / "a-file").write_text("x")
    launcher = env.launcher()
    for field, overrides in bad_requests(env):
        request = env.request(**overrides)
        with pytest.raises(ValidationError) as info:
            launcher.start(request)
        assert info.value.field == field, overrides
        assert SECRET not in str(info.value)
    with pytest.raises(InvalidIdentifierError):
        launcher.start(env.request(run_id=str(uuid7()).upper()))
    assert not env.log_root.exists()
    assert not env.receipt_root.exists()
    assert_nothing_ran(env)


@pytest.mark.integration
def test_step1_byte_budget_names_the_limit(env: Env) -> None:
    launcher = env.launcher(launch_max_bytes=1024)
    with pytest.raises(LaunchLimitError) as info:
        launcher.start(env.request(env={"PATH": "/bin", "BIG": SECRET * 60}))
    assert info.value.limit == "argv_env_bytes"
    assert SECRET not in str(info.value)
    with pytest.raises(LaunchLimitError) as info:
        env.launcher().start(env.request(argv=("touch", "x" * SINGLE_STRING_MAX_BYTES)))
    assert info.value.limit == "single_string_bytes"
    assert_nothing_ran(env)


def _wrapper_copy(env: Env, extra: bytes = b"") -> Path:
    copy = env.tmp / "wrapper.py"
    copy.write_bytes(Path(DEFAULT_WRAPPER_PATH).read_bytes() + extra)
    return copy


@pytest.mark.integration
def test_step2_refuses_a_changed_wrapper(env: Env) -> None:
    copy = _wrapper_copy(env, b"\nimport subprocess\n")
    with pytest.raises(LaunchError) as info:
        env.launcher(wrapper_path=str(copy)).start(env.request())
    assert info.value.step == 2
    assert "digest" in str(info.value)
    assert_nothing_ran(env)


@pytest.mark.integration
def test_step2_refuses_a_symlinked_fifo_or_oversized_wrapper(env: Env) -> None:
    link = env.tmp / "wrapper-link.py"
    link.symlink_to(_wrapper_copy(env))
    fifo = env.tmp / "wrapper-fifo.py"
    os.mkfifo(fifo)
    for overrides in (
        {"wrapper_path": str(link)},
        {"wrapper_path": str(fifo)},
        {"wrapper_path": str(env.tmp)},
        {"wrapper_path": str(env.tmp / "missing.py")},
        {"wrapper_max_bytes": 1024},
    ):
        with pytest.raises(LaunchError) as info:
            env.launcher(**overrides).start(env.request())
        assert info.value.step == 2
    assert_nothing_ran(env)


@pytest.mark.integration
def test_step3_refuses_a_symlinked_log_directory(env: Env) -> None:
    outside = env.tmp / "outside"
    outside.mkdir()
    env.log_root.mkdir()
    (env.log_root / "task").symlink_to(outside)
    with pytest.raises(LaunchError) as info:
        env.launcher().start(env.request())
    assert info.value.step == 3
    assert list(outside.iterdir()) == []
    assert_nothing_ran(env)


@pytest.mark.integration
def test_step3_refuses_a_symlinked_or_fifo_log_file(env: Env) -> None:
    target = env.tmp / "precious.txt"
    target.write_bytes(b"precious")
    before = os.stat(target)
    (env.log_root / "task").mkdir(parents=True)
    (env.log_root / "task" / "attempt.log").symlink_to(target)
    os.mkfifo(env.log_root / "task" / "fifo.log")
    for name in ("attempt.log", "fifo.log"):
        request = env.request(output_path=str(env.log_root / "task" / name))
        with pytest.raises(LaunchError) as info:
            env.launcher().start(request)
        assert info.value.step == 3
    assert target.read_bytes() == b"precious"
    assert os.stat(target).st_mtime_ns == before.st_mtime_ns
    assert_nothing_ran(env)


@pytest.mark.integration
def test_step3_refuses_a_symlinked_receipt_shard(env: Env) -> None:
    request = env.request()
    outside = env.tmp / "outside"
    outside.mkdir(mode=0o700)
    env.receipt_root.mkdir(mode=0o700)
    (env.receipt_root / request.attempt_id[-2:]).symlink_to(outside)
    with pytest.raises(LaunchError) as info:
        env.launcher().start(request)
    assert info.value.step == 3
    assert list(outside.iterdir()) == []
    assert_nothing_ran(env)


@pytest.mark.integration
def test_step4_journal_failure_spawns_nothing(env: Env) -> None:
    env.journal.error = ConflictError("conflicting registration")
    with pytest.raises(LaunchError) as info:
        env.launcher().start(env.request())
    assert info.value.step == 4
    assert isinstance(info.value.__cause__, ConflictError)
    assert_nothing_ran(env)


@pytest.mark.integration
def test_step4_registers_the_exact_attempt_and_receipt_path(env: Env) -> None:
    request = env.request()
    launcher = env.launcher()
    with launcher.start(request) as proc:
        assert env.journal.calls == [
            (request.run_id, request.attempt_id, launcher.store.receipt_path(request.attempt_id))
        ]
        proc.abandon_gate()
        assert proc.wait(10) == launcher_module.WRAPPER_EXIT_NOT_STARTED
    assert not env.marker.exists()


@pytest.mark.integration
def test_step5_spawn_failure_is_typed(env: Env) -> None:
    with pytest.raises(LaunchError) as info:
        env.launcher(python=str(env.tmp / "no-python")).start(env.request())
    assert info.value.step == 5
    assert_nothing_ran(env, registered=True)


@pytest.mark.integration
def test_step6_identity_failure_stops_the_group(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(pid: int) -> object:
        raise ProcessIdentityError("injected")

    monkeypatch.setattr(launcher_module, "capture_handle", fail)
    with pytest.raises(LaunchError) as info:
        env.launcher().start(env.request())
    assert info.value.step == 6
    [popen] = env.spawned
    assert popen.returncode is not None, "the wrapper was reaped"
    assert group_gone(popen.pid)
    assert not env.marker.exists()
