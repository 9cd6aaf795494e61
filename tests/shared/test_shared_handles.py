"""The durable process handle ``ql3lp1:<boot_id>:<pid>:<pgid>:<start_ticks>`` (docs/protocols.md
§3.2)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.shared.errors import HandleCodecError
from qinglong.shared.handles import HANDLE_PREFIX, PID_MAX, ProcessHandle

BOOT = "6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b"
VALID = f"ql3lp1:{BOOT}:4242:4242:123456"

boot_ids = st.uuids().map(str) | st.from_regex(
    r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z"
)
pids = st.integers(min_value=2, max_value=PID_MAX)
ticks = st.integers(min_value=0, max_value=2**64 - 1)


def test_valid_handle_decodes_to_its_fields() -> None:
    handle = ProcessHandle.decode(VALID)
    assert handle == ProcessHandle(boot_id=BOOT, pid=4242, pgid=4242, start_ticks=123456)
    assert handle.encode() == VALID


def test_encode_is_the_documented_layout() -> None:
    handle = ProcessHandle(BOOT, 2, 3, 0)
    assert HANDLE_PREFIX == "ql3lp1"
    assert handle.encode() == f"ql3lp1:{BOOT}:2:3:0"


@given(boot_id=boot_ids, pid=pids, pgid=pids, start_ticks=ticks)
def test_handle_round_trips_through_its_string(
    boot_id: str, pid: int, pgid: int, start_ticks: int
) -> None:
    handle = ProcessHandle(boot_id, pid, pgid, start_ticks)
    text = handle.encode()
    assert text.isascii()
    assert len(text) <= 128
    decoded = ProcessHandle.decode(text)
    assert decoded == handle
    assert decoded.encode() == text


def test_extreme_valid_values_round_trip() -> None:
    for handle in (
        ProcessHandle(BOOT, 2, 2, 0),
        ProcessHandle(BOOT, PID_MAX, PID_MAX, 2**64 - 1),
    ):
        assert ProcessHandle.decode(handle.encode()) == handle


def test_handle_is_immutable() -> None:
    handle = ProcessHandle.decode(VALID)
    with pytest.raises(AttributeError):
        handle.pid = 5  # type: ignore[misc]


BAD_TEXT = {
    "empty": "",
    "prefix only": "ql3lp1",
    "wrong prefix version": f"ql3lp2:{BOOT}:4242:4242:1",
    "uppercase prefix": f"QL3LP1:{BOOT}:4242:4242:1",
    "prefix with space": f" ql3lp1:{BOOT}:4242:4242:1",
    "no prefix": f"{BOOT}:4242:4242:1",
    "missing ticks": f"ql3lp1:{BOOT}:4242:4242",
    "missing pgid and ticks": f"ql3lp1:{BOOT}:4242",
    "extra field": f"ql3lp1:{BOOT}:4242:4242:1:9",
    "trailing colon": f"ql3lp1:{BOOT}:4242:4242:1:",
    "empty pid": f"ql3lp1:{BOOT}::4242:1",
    "empty ticks": f"ql3lp1:{BOOT}:4242:4242:",
    "leading zero pid": f"ql3lp1:{BOOT}:04242:4242:1",
    "leading zero pgid": f"ql3lp1:{BOOT}:4242:04242:1",
    "leading zero ticks": f"ql3lp1:{BOOT}:4242:4242:01",
    "double zero ticks": f"ql3lp1:{BOOT}:4242:4242:00",
    "plus sign": f"ql3lp1:{BOOT}:+4242:4242:1",
    "minus sign": f"ql3lp1:{BOOT}:4242:-4242:1",
    "negative ticks": f"ql3lp1:{BOOT}:4242:4242:-1",
    "space before number": f"ql3lp1:{BOOT}: 4242:4242:1",
    "space after number": f"ql3lp1:{BOOT}:4242 :4242:1",
    "trailing newline": VALID + "\n",
    "trailing space": VALID + " ",
    "underscore digits": f"ql3lp1:{BOOT}:4_242:4242:1",
    "hex number": f"ql3lp1:{BOOT}:0x10:4242:1",
    "fullwidth digits": f"ql3lp1:{BOOT}:\uff14\uff12:4242:1",
    "arabic-indic digits": f"ql3lp1:{BOOT}:\u0664\u0662:4242:1",
    "float ticks": f"ql3lp1:{BOOT}:4242:4242:1.0",
    "pid 0": f"ql3lp1:{BOOT}:0:4242:1",
    "pid 1": f"ql3lp1:{BOOT}:1:4242:1",
    "pgid 0": f"ql3lp1:{BOOT}:4242:0:1",
    "pgid 1": f"ql3lp1:{BOOT}:4242:1:1",
    "pid above PID_MAX": f"ql3lp1:{BOOT}:{PID_MAX + 1}:4242:1",
    "pgid above PID_MAX": f"ql3lp1:{BOOT}:4242:{PID_MAX + 1}:1",
    "ticks 2**64": f"ql3lp1:{BOOT}:4242:4242:{2**64}",
    "ticks 21 digits": f"ql3lp1:{BOOT}:4242:4242:{'9' * 21}",
    "uppercase boot id": f"ql3lp1:{BOOT.upper()}:4242:4242:1",
    "boot id without dashes": f"ql3lp1:{BOOT.replace('-', '')}:4242:4242:1",
    "boot id in braces": f"ql3lp1:{{{BOOT}}}:4242:4242:1",
    "boot id short": f"ql3lp1:{BOOT[:-1]}:4242:4242:1",
    "boot id not hex": f"ql3lp1:{BOOT[:-1]}g:4242:4242:1",
    "boot id with newline": f"ql3lp1:{BOOT}\n:4242:4242:1",
    "very long": f"ql3lp1:{BOOT}:4242:4242:" + "1" * 200,
    "very long and otherwise junk": "x" * 10_000,
    "NUL inside": f"ql3lp1:{BOOT}:4242\x00:4242:1",
}


@pytest.mark.parametrize("text", list(BAD_TEXT.values()), ids=list(BAD_TEXT))
def test_decode_rejects_malformed_handle(text: str) -> None:
    with pytest.raises(HandleCodecError):
        ProcessHandle.decode(text)


@pytest.mark.parametrize(
    "value",
    [None, 42, VALID.encode(), bytearray(VALID.encode()), [VALID], {"handle": VALID}],
    ids=["none", "int", "bytes", "bytearray", "list", "dict"],
)
def test_decode_rejects_non_string(value: object) -> None:
    with pytest.raises(HandleCodecError):
        ProcessHandle.decode(value)


@pytest.mark.parametrize(
    ("boot_id", "pid", "pgid", "start_ticks"),
    [
        (BOOT.upper(), 2, 2, 0),
        (str(uuid.UUID(BOOT)).replace("-", ""), 2, 2, 0),
        (uuid.UUID(BOOT), 2, 2, 0),
        (BOOT, 1, 2, 0),
        (BOOT, 2, 1, 0),
        (BOOT, 0, 2, 0),
        (BOOT, -5, 2, 0),
        (BOOT, PID_MAX + 1, 2, 0),
        (BOOT, True, 2, 0),
        (BOOT, 2, True, 0),
        (BOOT, 2, 2, False),
        (BOOT, 2.0, 2, 0),
        (BOOT, "2", 2, 0),
        (BOOT, 2, 2, -1),
        (BOOT, 2, 2, 2**64),
        (BOOT, 2, 2, None),
    ],
)
def test_constructor_rejects_out_of_range_fields(
    boot_id: object, pid: object, pgid: object, start_ticks: object
) -> None:
    with pytest.raises(HandleCodecError):
        ProcessHandle(boot_id, pid, pgid, start_ticks)  # type: ignore[arg-type]


@given(
    boot_id=boot_ids,
    pid=pids,
    pgid=pids,
    start_ticks=ticks,
    cut=st.integers(min_value=0, max_value=200),
)
def test_any_proper_prefix_of_a_handle_is_rejected(
    boot_id: str, pid: int, pgid: int, start_ticks: int, cut: int
) -> None:
    text = ProcessHandle(boot_id, pid, pgid, start_ticks).encode()
    cut %= len(text)
    truncated = text[:cut]
    # A truncation that ends inside the last number is itself a valid (different) handle.
    last_colon = text.rfind(":")
    if cut > last_colon + 1:
        assert ProcessHandle.decode(truncated).start_ticks == int(text[last_colon + 1 : cut])
    else:
        with pytest.raises(HandleCodecError):
            ProcessHandle.decode(truncated)


@given(boot_id=boot_ids, pid=pids, start_ticks=ticks, junk=st.text(min_size=1, max_size=5))
def test_appended_junk_is_rejected_unless_it_is_more_canonical_digits(
    boot_id: str, pid: int, start_ticks: int, junk: str
) -> None:
    text = ProcessHandle(boot_id, pid, pid, start_ticks).encode() + junk
    last = text.rsplit(":", 1)[1]
    still_canonical = (
        junk.isascii() and junk.isdigit() and not last.startswith("0") and int(last) < 2**64
    )
    if still_canonical:
        assert ProcessHandle.decode(text).start_ticks == int(last)
    else:
        with pytest.raises(HandleCodecError):
            ProcessHandle.decode(text)
