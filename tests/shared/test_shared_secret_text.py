"""``decode_secret`` (issue 12 item 7): what a secret read from stdin or a file may be; the
messages never quote the value."""

from __future__ import annotations

import pytest

from qinglong.shared.errors import ValidationError
from qinglong.shared.secret_text import decode_secret


@pytest.mark.parametrize("data", [b"", b"\n", b"\r\n"], ids=["nothing", "newline", "crlf"])
def test_an_empty_value_is_refused_saying_so(data: bytes) -> None:
    with pytest.raises(ValidationError, match="the value is empty") as caught:
        decode_secret(data, "secret API_KEY")
    assert caught.value.field == "secret API_KEY"


def test_one_trailing_newline_is_dropped_and_the_rest_kept() -> None:
    assert decode_secret(b"s3cr3t\n", "x") == "s3cr3t"
    assert decode_secret(b" two words \n\n", "x") == " two words \n"


@pytest.mark.parametrize(("data", "reason"), [
    (b"a" * 9, "exceeds 8 bytes"), (b"\xff\xfe", "not UTF-8"), (b"a\x00b", "NUL byte"),
])
def test_bad_values_are_refused_without_quoting_them(data: bytes, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason) as caught:
        decode_secret(data, "x", max_bytes=8)
    assert data.decode(errors="replace") not in str(caught.value)
