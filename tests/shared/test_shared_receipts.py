"""Completion receipt codec ``ql3-receipt@v1`` (docs/protocols.md §3.3, ADR-0069 §2).

Rejection cases start from a valid receipt, change one thing, and re-serialise canonically
(sorted keys, no whitespace), so each case is refused for the one reason it names and not
merely because its bytes stopped being canonical.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.shared.errors import ReceiptCodecError
from qinglong.shared.handles import PID_MAX, ProcessHandle
from qinglong.shared.ids import uuid7
from qinglong.shared.receipts import (
    RECEIPT_FORMAT,
    RECEIPT_MAX_BYTES,
    CompletionReceipt,
    ReceiptOutcome,
    decode_receipt,
)

BOOT = "6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b"
RUN_ID = "01920d3c-5e7f-7a1b-8c2d-3e4f5a6b7c8d"
ATTEMPT_ID = "01920d3c-5e80-7a1b-9c2d-3e4f5a6b7c8d"
KEYS = [
    "attempt_id",
    "boot_id",
    "exit_code",
    "finished_at_ms",
    "format",
    "outcome",
    "pgid",
    "pid",
    "run_id",
    "signal",
    "start_ticks",
]


def canonical(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def valid_fields(**changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "attempt_id": ATTEMPT_ID,
        "boot_id": BOOT,
        "exit_code": 0,
        "finished_at_ms": 1_727_000_000_000,
        "format": RECEIPT_FORMAT,
        "outcome": "exited",
        "pgid": 4242,
        "pid": 4242,
        "run_id": RUN_ID,
        "signal": None,
        "start_ticks": 987_654,
    }
    fields.update(changes)
    return fields


def make_receipt(
    outcome: ReceiptOutcome = ReceiptOutcome.EXITED,
    exit_code: int | None = 0,
    signal: int | None = None,
) -> CompletionReceipt:
    return CompletionReceipt(
        run_id=RUN_ID,
        attempt_id=ATTEMPT_ID,
        handle=ProcessHandle(BOOT, 4242, 4242, 987_654),
        outcome=outcome,
        exit_code=exit_code,
        signal=signal,
        finished_at_ms=1_727_000_000_000,
    )


# --- strategies ----------------------------------------------------------------------------


@st.composite
def uuid7s(draw: st.DrawFn) -> str:
    ms = draw(st.integers(min_value=0, max_value=2**48 - 1))
    rand_a = draw(st.integers(min_value=0, max_value=2**12 - 1))
    rand_b = draw(st.integers(min_value=0, max_value=2**62 - 1))
    return str(uuid.UUID(int=(ms << 80) | (0x7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b))


pids = st.integers(min_value=2, max_value=PID_MAX)
handles = st.builds(
    ProcessHandle,
    boot_id=st.uuids().map(str),
    pid=pids,
    pgid=pids,
    start_ticks=st.integers(min_value=0, max_value=2**64 - 1),
)
outcome_fields = st.one_of(
    st.tuples(st.just(ReceiptOutcome.EXITED), st.integers(min_value=0, max_value=255), st.none()),
    st.tuples(st.just(ReceiptOutcome.SIGNALED), st.none(), st.integers(min_value=1, max_value=64)),
    st.tuples(st.just(ReceiptOutcome.NOT_STARTED), st.none(), st.none()),
)


@st.composite
def receipts(draw: st.DrawFn) -> CompletionReceipt:
    outcome, exit_code, sig = draw(outcome_fields)
    return CompletionReceipt(
        run_id=draw(uuid7s()),
        attempt_id=draw(uuid7s()),
        handle=draw(handles),
        outcome=outcome,
        exit_code=exit_code,
        signal=sig,
        finished_at_ms=draw(st.integers(min_value=0, max_value=2**53 - 1)),
    )


# --- round trip ----------------------------------------------------------------------------


@given(receipts())
def test_receipt_round_trips_for_every_outcome(receipt: CompletionReceipt) -> None:
    data = receipt.encode()
    decoded = decode_receipt(data)
    assert decoded == receipt
    assert decoded.encode() == data


@given(receipts())
def test_encoding_is_canonical_ascii_json_within_the_size_cap(receipt: CompletionReceipt) -> None:
    data = receipt.encode()
    assert data.isascii()
    assert len(data) <= RECEIPT_MAX_BYTES
    obj = json.loads(data)
    assert list(obj) == KEYS
    assert obj["format"] == "ql3-receipt@v1"
    assert canonical(obj) == data
    assert b" " not in data


def test_uuid7_strategy_matches_the_id_generator() -> None:
    # The round-trip strategy builds ids by hand; it must describe the same values uuid7() makes.
    value = uuid.UUID(uuid7())
    assert value.version == 7
    assert (value.int >> 62) & 0b11 == 0b10


@pytest.mark.parametrize(
    ("receipt", "expected"),
    [
        (make_receipt(ReceiptOutcome.EXITED, 0, None), 0),
        (make_receipt(ReceiptOutcome.EXITED, 7, None), 7),
        (make_receipt(ReceiptOutcome.SIGNALED, None, 9), 137),
        (make_receipt(ReceiptOutcome.SIGNALED, None, 15), 143),
        (make_receipt(ReceiptOutcome.NOT_STARTED, None, None), None),
    ],
)
def test_wait_exit_code_reports_like_a_shell(
    receipt: CompletionReceipt, expected: int | None
) -> None:
    assert receipt.wait_exit_code == expected


def test_decoded_outcome_is_the_enum_member() -> None:
    decoded = decode_receipt(make_receipt(ReceiptOutcome.SIGNALED, None, 9).encode())
    assert decoded.outcome is ReceiptOutcome.SIGNALED
    assert decoded.handle == ProcessHandle(BOOT, 4242, 4242, 987_654)


# --- size and syntax -----------------------------------------------------------------------


def test_decode_rejects_empty_receipt() -> None:
    with pytest.raises(ReceiptCodecError):
        decode_receipt(b"")


def test_decode_rejects_receipt_over_4096_bytes_before_parsing() -> None:
    data = make_receipt().encode()
    oversized = data + b" " * (RECEIPT_MAX_BYTES + 1 - len(data))
    assert len(oversized) == RECEIPT_MAX_BYTES + 1
    with pytest.raises(ReceiptCodecError, match="4096"):
        decode_receipt(oversized)
    with pytest.raises(ReceiptCodecError, match="4096"):
        decode_receipt(b"x" * 1_000_000)


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"{",
        b"}",
        b"\xff\xfe{}",
        b"\x00",
        b"{'format': 'ql3-receipt@v1'}",
        make_receipt().encode()[:-1],
        make_receipt().encode().replace(RUN_ID.encode(), RUN_ID[:-1].encode() + "\u00e9".encode()),
    ],
    ids=[
        "text",
        "open-brace",
        "close-brace",
        "binary",
        "nul",
        "python-repr",
        "truncated",
        "utf8-non-ascii",
    ],
)
def test_decode_rejects_non_json(data: bytes) -> None:
    with pytest.raises(ReceiptCodecError):
        decode_receipt(data)


@pytest.mark.parametrize(
    "data",
    [b"[]", b"null", b"0", b'"ql3-receipt@v1"', b"true", canonical([valid_fields()])],
    ids=["list", "null", "number", "string", "bool", "list-of-receipt"],
)
def test_decode_rejects_json_that_is_not_an_object(data: bytes) -> None:
    with pytest.raises(ReceiptCodecError):
        decode_receipt(data)


def test_decode_rejects_deeply_nested_json_with_a_codec_error() -> None:
    with pytest.raises(ReceiptCodecError):
        decode_receipt(b"[" * RECEIPT_MAX_BYTES)


# --- canonical form ------------------------------------------------------------------------


def _unsorted(obj: dict[str, Any]) -> bytes:
    return json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":")).encode()


NON_CANONICAL = {
    "indented": json.dumps(valid_fields(), sort_keys=True, indent=1).encode(),
    "default separators": json.dumps(valid_fields(), sort_keys=True).encode(),
    "space after colon": json.dumps(
        valid_fields(), sort_keys=True, separators=(",", ": ")
    ).encode(),
    "trailing newline": canonical(valid_fields()) + b"\n",
    "leading space": b" " + canonical(valid_fields()),
    "trailing tab": canonical(valid_fields()) + b"\t",
    "unsorted keys": _unsorted(valid_fields()),
    "escaped ascii in string": canonical(valid_fields()).replace(
        BOOT.encode(), b"\\u0036" + BOOT[1:].encode()
    ),
    "escaped at sign": canonical(valid_fields(format="ql3-receipt@v1")).replace(b"@", b"\\u0040"),
    "negative zero exit code": canonical(valid_fields()).replace(
        b'"exit_code":0', b'"exit_code":-0'
    ),
    "duplicate key": canonical(valid_fields()).replace(
        b'{"attempt_id"', b'{"attempt_id":"x","attempt_id"'
    ),
}


@pytest.mark.parametrize("data", list(NON_CANONICAL.values()), ids=list(NON_CANONICAL))
def test_decode_rejects_non_canonical_encoding(data: bytes) -> None:
    # Every case still parses to valid fields, so only the canonical-form check can refuse it.
    assert data != canonical(valid_fields())
    with pytest.raises(ReceiptCodecError, match="canonical"):
        decode_receipt(data)


def test_the_unchanged_baseline_is_accepted() -> None:
    """Guards the rejection tables: their baseline really is a valid receipt."""
    receipt = decode_receipt(canonical(valid_fields()))
    assert receipt == make_receipt()


# --- keys, format, types, values ------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS)
def test_decode_rejects_missing_key(key: str) -> None:
    fields = valid_fields()
    del fields[key]
    with pytest.raises(ReceiptCodecError):
        decode_receipt(canonical(fields))


@pytest.mark.parametrize(
    ("key", "value"),
    [("extra", 1), ("Format", RECEIPT_FORMAT), ("stdout", ""), ("handle", None)],
)
def test_decode_rejects_extra_key(key: str, value: object) -> None:
    with pytest.raises(ReceiptCodecError):
        decode_receipt(canonical(valid_fields(**{key: value})))


@pytest.mark.parametrize(
    "tag",
    ["ql3-receipt@v2", "ql3-receipt@v0", "ql3-receipt", "QL3-RECEIPT@V1", "", None, 1, ["x"]],
)
def test_decode_rejects_wrong_format_tag(tag: object) -> None:
    with pytest.raises(ReceiptCodecError):
        decode_receipt(canonical(valid_fields(format=tag)))


BAD_FIELDS: dict[str, dict[str, Any]] = {
    # bool is an int subclass in Python: the codec must check ``type(x) is int``.
    "exit_code true": {"exit_code": True},
    "exit_code false": {"exit_code": False},
    "pid true": {"pid": True},
    "pgid true": {"pgid": True},
    "start_ticks false": {"start_ticks": False},
    "finished_at_ms true": {"finished_at_ms": True},
    "signal true": {"outcome": "signaled", "exit_code": None, "signal": True},
    # other wrong types
    "exit_code float": {"exit_code": 0.0},
    "exit_code string": {"exit_code": "0"},
    "pid string": {"pid": "4242"},
    "pid float": {"pid": 4242.0},
    "start_ticks list": {"start_ticks": [1]},
    "finished_at_ms string": {"finished_at_ms": "1727000000000"},
    "boot_id number": {"boot_id": 1},
    "run_id number": {"run_id": 1},
    "attempt_id null": {"attempt_id": None},
    "outcome null": {"outcome": None},
    "outcome number": {"outcome": 0},
    "outcome object": {"outcome": {"exited": True}},
    "outcome list": {"outcome": ["exited"]},
    # outcome and exit code / signal must fit each other
    "unknown outcome": {"outcome": "killed"},
    "uppercase outcome": {"outcome": "EXITED"},
    "signaled with exit_code": {"outcome": "signaled", "exit_code": 0, "signal": 9},
    "signaled with exit_code only": {"outcome": "signaled", "exit_code": 137, "signal": None},
    "signaled without signal": {"outcome": "signaled", "exit_code": None, "signal": None},
    "exited with signal": {"outcome": "exited", "exit_code": 0, "signal": 9},
    "exited without exit_code": {"outcome": "exited", "exit_code": None, "signal": None},
    "not_started with exit_code": {"outcome": "not_started", "exit_code": 0, "signal": None},
    "not_started with signal": {"outcome": "not_started", "exit_code": None, "signal": 9},
    # ranges
    "exit_code 256": {"exit_code": 256},
    "exit_code -1": {"exit_code": -1},
    "signal 0": {"outcome": "signaled", "exit_code": None, "signal": 0},
    "signal 65": {"outcome": "signaled", "exit_code": None, "signal": 65},
    "finished_at_ms negative": {"finished_at_ms": -1},
    "finished_at_ms 2**53": {"finished_at_ms": 2**53},
    "pid 1": {"pid": 1},
    "pgid 0": {"pgid": 0},
    "pid above PID_MAX": {"pid": PID_MAX + 1},
    "start_ticks negative": {"start_ticks": -1},
    "start_ticks 2**64": {"start_ticks": 2**64},
    "boot_id uppercase": {"boot_id": BOOT.upper()},
    "boot_id not uuid": {"boot_id": "boot"},
    # identifiers must be UUIDv7
    "run_id uuid4": {"run_id": "0b2e8c1a-4d3f-4a6b-9c8d-7e6f5a4b3c2d"},
    "run_id nil": {"run_id": "00000000-0000-0000-0000-000000000000"},
    "run_id uppercase v7": {"run_id": RUN_ID.upper()},
    "run_id v7 wrong variant": {"run_id": "01920d3c-5e7f-7a1b-cc2d-3e4f5a6b7c8d"},
    "run_id without dashes": {"run_id": RUN_ID.replace("-", "")},
    "run_id in braces": {"run_id": "{" + RUN_ID + "}"},
    "attempt_id uuid1": {"attempt_id": "c232ab00-9414-11ec-b3c8-9f6bdeced846"},
    "attempt_id empty": {"attempt_id": ""},
}


@pytest.mark.parametrize("changes", list(BAD_FIELDS.values()), ids=list(BAD_FIELDS))
def test_decode_rejects_invalid_field(changes: dict[str, Any]) -> None:
    data = canonical(valid_fields(**changes))
    assert len(data) <= RECEIPT_MAX_BYTES
    with pytest.raises(ReceiptCodecError):
        decode_receipt(data)


@pytest.mark.parametrize(
    ("outcome", "exit_code", "sig"),
    [
        (ReceiptOutcome.EXITED, None, None),
        (ReceiptOutcome.EXITED, 0, 9),
        (ReceiptOutcome.EXITED, True, None),
        (ReceiptOutcome.SIGNALED, 0, 9),
        (ReceiptOutcome.SIGNALED, None, 0),
        (ReceiptOutcome.NOT_STARTED, 0, None),
        (ReceiptOutcome.NOT_STARTED, None, 15),
    ],
)
def test_constructor_refuses_exit_code_and_signal_that_do_not_fit_the_outcome(
    outcome: ReceiptOutcome, exit_code: Any, sig: Any
) -> None:
    with pytest.raises(ReceiptCodecError):
        make_receipt(outcome, exit_code, sig)


@pytest.mark.parametrize("outcome", ["exited", "not_started", None])
def test_constructor_refuses_an_outcome_that_is_not_a_receipt_outcome(outcome: object) -> None:
    with pytest.raises(ReceiptCodecError):
        make_receipt(outcome, None, None)  # type: ignore[arg-type]


@given(receipts(), st.integers(min_value=0, max_value=400), st.binary(min_size=1, max_size=3))
def test_any_single_splice_of_a_valid_receipt_is_rejected_or_decodes_canonically(
    receipt: CompletionReceipt, position: int, splice: bytes
) -> None:
    """Fuzz: inserting bytes anywhere either fails with a codec error or yields a receipt
    whose canonical encoding is exactly the spliced bytes (never another error type)."""
    data = receipt.encode()
    position %= len(data) + 1
    mutated = data[:position] + splice + data[position:]
    try:
        decoded = decode_receipt(mutated)
    except ReceiptCodecError:
        return
    assert decoded.encode() == mutated
