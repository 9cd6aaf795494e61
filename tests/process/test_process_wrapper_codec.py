"""The wrapper script as a module: pinned digest, environment contract, receipt bytes."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.local.process import launcher, wrapper_identity
from qinglong.local.process.launch_request import (
    DEFAULT_WRAPPER_PATH,
    LOG_CAP_PATH,
    OUTPUT_MASK_PATH,
)
from qinglong.local.process.wrapper_digest import (
    LOG_CAP_SHA256,
    OUTPUT_MASK_SHA256,
    WRAPPER_SHA256,
)
from qinglong.shared.handles import ProcessHandle
from qinglong.shared.ids import uuid7
from qinglong.shared.process.identity import capture_handle
from qinglong.shared.receipts import CompletionReceipt, ReceiptOutcome, decode_receipt

BOOT_ID = "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f9"


def load_wrapper() -> ModuleType:
    # a .pyw file: a source loader named explicitly (import machinery knows .py only)
    loader = importlib.machinery.SourceFileLoader("ql3_wrapper_under_test", DEFAULT_WRAPPER_PATH)
    spec = importlib.util.spec_from_file_location("ql3_wrapper_under_test", DEFAULT_WRAPPER_PATH,
                                                  loader=loader)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wrapper = load_wrapper()


def test_wrapper_digest_matches_the_pinned_constant() -> None:
    digest = hashlib.sha256(Path(DEFAULT_WRAPPER_PATH).read_bytes()).hexdigest()
    assert digest == WRAPPER_SHA256, (
        "wrapper.pyw changed: review the change, then update WRAPPER_SHA256 in "
        f"wrapper_digest.py to {digest}"
    )


@pytest.mark.parametrize(("path", "pinned"), [(OUTPUT_MASK_PATH, OUTPUT_MASK_SHA256),
                                             (LOG_CAP_PATH, LOG_CAP_SHA256)])
def test_the_wrappers_output_files_match_their_pinned_digests(path: str, pinned: str) -> None:
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert digest == pinned, f"{path} changed: update its digest in wrapper_digest.py"


def test_wrapper_imports_only_its_allowed_modules() -> None:
    source = Path(DEFAULT_WRAPPER_PATH).read_text(encoding="utf-8")
    imports = {line.split()[1] for line in source.splitlines() if line.startswith("import ")}
    assert imports == {"fcntl", "marshal", "os", "_signal", "sys", "time"}  # _signal: no enum
    assert not [line for line in source.splitlines() if line.startswith("from ")]
    for path in (OUTPUT_MASK_PATH, LOG_CAP_PATH):  # compiled into the wrapper at run time
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        runtime = {line.split()[1] for line in lines if line.startswith("import ")}
        assert runtime <= {"os", "select"}
        assert not [line for line in lines if line.startswith("from ")]


def test_wrapper_environment_contract_matches_the_launcher() -> None:
    assert wrapper.ENV_RUN_ID == launcher.ENV_RUN_ID
    assert wrapper.ENV_ATTEMPT_ID == launcher.ENV_ATTEMPT_ID == wrapper_identity.ENV_ATTEMPT_ID
    assert wrapper.ENV_GATE_FD == launcher.ENV_GATE_FD
    assert wrapper.ENV_LC_CTYPE == launcher.ENV_LC_CTYPE
    assert wrapper.ENV_RECEIPT_DIR == launcher.ENV_RECEIPT_DIR
    for name in ("ENV_LOG_CAP", "ENV_LOG_DIR_FD", "ENV_LOG_NAME", "ENV_SECRET_NAMES",
                 "ENV_LIB_FDS"):
        assert getattr(wrapper, name) == getattr(launcher, name)
    assert wrapper.EXIT_NOT_STARTED == launcher.WRAPPER_EXIT_NOT_STARTED
    for name in (launcher.ENV_RUN_ID, launcher.ENV_GATE_FD, launcher.ENV_RECEIPT_DIR):
        assert name.startswith(("QL3_LAUNCH_", "QL3_RECEIPT_"))


CASES = [
    (ReceiptOutcome.EXITED, 0, None),
    (ReceiptOutcome.EXITED, 3, None),
    (ReceiptOutcome.EXITED, 255, None),
    (ReceiptOutcome.SIGNALED, None, 9),
    (ReceiptOutcome.SIGNALED, None, 15),
    (ReceiptOutcome.NOT_STARTED, None, None),
]


@pytest.mark.parametrize(("outcome", "code", "sig"), CASES)
def test_hand_built_receipt_equals_the_codec(
    outcome: ReceiptOutcome, code: int | None, sig: int | None
) -> None:
    handle = ProcessHandle(BOOT_ID, 4242, 4242, 123456)
    receipt = CompletionReceipt(uuid7(), uuid7(), handle, outcome, code, sig, 1_780_000_000_123)
    data = wrapper.encode_receipt(
        receipt.run_id,
        receipt.attempt_id,
        (BOOT_ID, 4242, 4242, 123456),
        outcome.value,
        code,
        sig,
        receipt.finished_at_ms,
    )
    assert data == receipt.encode()
    assert decode_receipt(data) == receipt


@given(
    pid=st.integers(2, 4_194_304),
    pgid=st.integers(2, 4_194_304),
    ticks=st.integers(0, 2**64 - 1),
    finished=st.integers(0, 2**53 - 1),
    code=st.integers(0, 255),
)
def test_hand_built_receipt_equals_the_codec_for_any_numbers(
    pid: int, pgid: int, ticks: int, finished: int, code: int
) -> None:
    handle = ProcessHandle(BOOT_ID, pid, pgid, ticks)
    receipt = CompletionReceipt(
        uuid7(), uuid7(), handle, ReceiptOutcome.EXITED, code, None, finished
    )
    built = wrapper.encode_receipt(
        receipt.run_id, receipt.attempt_id, (BOOT_ID, pid, pgid, ticks), "exited", code, None,
        finished,
    )  # fmt: skip
    assert built == receipt.encode()


def test_encoder_refuses_text_that_would_need_escaping() -> None:
    with pytest.raises(ValueError, match="UUID"):
        wrapper.encode_receipt('"' * 36, uuid7(), (BOOT_ID, 2, 2, 0), "exited", 0, None, 0)
    with pytest.raises(ValueError, match="outcome"):
        wrapper.encode_receipt(uuid7(), uuid7(), (BOOT_ID, 2, 2, 0), "bogus", 0, None, 0)


def test_wrapper_identity_is_the_handle_capture_handle_sees() -> None:
    boot_id, pid, pgid, ticks = wrapper.own_identity()
    assert capture_handle(os.getpid()) == ProcessHandle(boot_id, pid, pgid, ticks)


def test_user_environment_drops_the_contract_and_restores_lc_ctype(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("QL3_LAUNCH_RUN_ID", "x")
    monkeypatch.setenv("QL3_RECEIPT_DIR", "/x")
    monkeypatch.setenv("QL3_OTHER", "kept")
    monkeypatch.setenv("LC_CTYPE", "C.UTF-8")  # what CPython's locale coercion adds
    monkeypatch.setenv("QL3_LAUNCH_LC_CTYPE", "-")
    env = wrapper.user_environment()
    assert not [k for k in env if k.startswith((b"QL3_LAUNCH_", b"QL3_RECEIPT_"))]
    assert env[b"QL3_OTHER"] == b"kept"
    assert b"LC_CTYPE" not in env
    monkeypatch.setenv("QL3_LAUNCH_LC_CTYPE", "=C")
    assert wrapper.user_environment()[b"LC_CTYPE"] == b"C"
