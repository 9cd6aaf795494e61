"""``decode_secret`` (issue 12 item 7): what a secret read from stdin or a file may be; the
messages never quote the value."""

from __future__ import annotations

from pathlib import Path

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


def test_read_secret_reads_a_file_or_piped_stdin_and_prompts_only_on_a_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from qinglong.shared.secret_text import read_secret

    asked: list[str] = []

    def prompt(label: str) -> str:
        asked.append(label)
        return "从终端"

    path = tmp_path / "value"
    path.write_bytes("文件里的值\n".encode())
    assert read_secret("variable CK", prompt, str(path)) == "文件里的值"
    with pytest.raises(ValidationError, match="cannot read"):
        read_secret("variable CK", prompt, str(tmp_path / "missing"))

    class Pipe(io.TextIOWrapper):
        def isatty(self) -> bool:
            return False

    class Tty(Pipe):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Pipe(io.BytesIO("管道-value\n".encode())))
    assert read_secret("variable CK", prompt) == "管道-value" and asked == []
    monkeypatch.setattr("sys.stdin", Tty(io.BytesIO(b"")))
    assert read_secret("variable CK", prompt) == "从终端"
    assert asked == ["value of variable CK"]
