"""The streaming secret masker (shared/qinglong/shared/output_mask.py)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from qinglong.shared.output_mask import MASK, OutputMasker


def _whole(secrets: list[bytes], data: bytes) -> bytes:
    masker = OutputMasker(secrets)
    return masker.feed(data) + masker.flush()


def _reference(secrets: list[bytes], data: bytes) -> bytes:
    """Leftmost, then longest, match: what a regex alternation of the values sorted longest
    first does."""
    kept = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)
    if not kept:
        return data
    pattern = re.compile(b"|".join(re.escape(s) for s in kept))
    return pattern.sub(MASK, data)


def test_a_value_split_across_two_writes_is_masked() -> None:
    masker = OutputMasker([b"hunter22"])
    out = masker.feed(b"cookie=hun") + masker.feed(b"ter22; ok\n") + masker.flush()
    assert out == b"cookie=***; ok\n"


def test_short_values_are_not_masked_and_nothing_is_held() -> None:
    masker = OutputMasker([b"abc12"])
    assert masker.feed(b"abc12abc12") == b"abc12abc12"
    assert masker.held == 0


def test_at_most_the_longest_value_minus_one_byte_is_held_back() -> None:
    masker = OutputMasker([b"secret-value", b"token1"])
    assert masker.feed(b"x" * 100 + b"secret-valu") == b"x" * 100
    assert masker.held == len(b"secret-value") - 1
    assert masker.flush() == b"secret-valu"


def test_a_line_that_cannot_begin_a_value_is_not_held_back() -> None:
    masker = OutputMasker([b"glob-Wx27-SECRET"])
    assert masker.feed(b"start token=16 chars\n") == b"start token=16 chars\n"
    assert masker.held == 0
    assert masker.feed(b"next: glob-W") == b"next: "
    assert masker.held == len(b"glob-W")


def test_chinese_and_invalid_bytes_around_a_value() -> None:
    secret = "密码Пароль123".encode()
    data = b"\xff\xfe" + "前".encode() + secret + "后".encode() + secret
    assert _whole([secret], data) == b"\xff\xfe" + "前".encode() + MASK + "后".encode() + MASK


@st.composite
def stream_with_secrets(draw: st.DrawFn) -> tuple[list[bytes], bytes, list[int]]:
    alphabet = st.sampled_from([b"a", b"b", b"\x00", b"\xe4", b"x"])
    secrets = draw(st.lists(st.lists(alphabet, min_size=4, max_size=9).map(b"".join),
                            min_size=0, max_size=4))
    pieces = draw(st.lists(st.one_of(alphabet, st.sampled_from(secrets or [b"z"])),
                           max_size=60))
    data = b"".join(pieces)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    return secrets, data, cuts


@given(stream_with_secrets())
def test_any_split_of_the_stream_masks_as_the_whole_does(
    case: tuple[list[bytes], bytes, list[int]]
) -> None:
    secrets, data, cuts = case
    masker = OutputMasker(secrets)
    out, start = b"", 0
    for cut in [*cuts, len(data)]:
        out += masker.feed(data[start:cut])
        assert masker.held <= max(0, masker.longest - 1)
        start = cut
    out += masker.flush()
    assert out == _whole(secrets, data) == _reference(secrets, data)
    for secret in secrets:
        if len(secret) >= 6:
            assert secret not in out.replace(MASK, b"\x01")
