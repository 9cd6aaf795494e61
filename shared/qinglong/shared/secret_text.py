"""A secret value as typed or piped in (issue 12 item 7): never from argv, checked here
without ever echoing it. Shared by ``ql3 local`` (``vars set``, ``--secret-env``) and
``ql3 cluster task add|edit --secret-env``. Stdlib only: the terminal prompt itself is the
caller's (``read_secret``'s ``prompt``: each command line prompts with click)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from qinglong.shared.errors import ValidationError

SECRET_MAX_BYTES = 128 * 1024  # the launcher's limit of one variable (MAX_ARG_STRLEN)


def decode_secret(data: bytes, what: str, max_bytes: int = SECRET_MAX_BYTES) -> str:
    """The text of ``data`` read for ``what`` (at most ``max_bytes`` + 1 bytes read, so too
    long is detectable), one trailing newline dropped (``echo x | ...`` gives ``x``).

    Raises ValidationError(what, ...) when it is empty (nothing on stdin: ``< /dev/null``,
    a pipe from a command that printed nothing), larger than ``max_bytes``, not UTF-8 or
    holds NUL; the message never quotes the value.
    """
    if len(data) > max_bytes:
        raise ValidationError(what, f"the value exceeds {max_bytes} bytes")
    if data.endswith(b"\r\n"):
        data = data[:-2]
    elif data.endswith(b"\n"):
        data = data[:-1]
    if not data:
        raise ValidationError(what, "the value is empty: nothing was read (stdin or the file)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValidationError(what, "the value is not UTF-8 text") from None
    if "\x00" in text:
        raise ValidationError(what, "the value contains a NUL byte")
    return text


def read_secret(what: str, prompt: Callable[[str], str], from_file: str | None = None) -> str:
    """The value of ``what``: from the file ``from_file`` when given, else ``prompt("value of
    <what>")`` (a hidden prompt) when stdin is a terminal, else all of stdin (never argv);
    checked by :func:`decode_secret` (at most SECRET_MAX_BYTES). Raises ValidationError(what,
    ...) for an unreadable file (naming its path and the OS's reason) or a value
    ``decode_secret`` refuses; the message never quotes the value."""
    if from_file is not None:
        try:
            with open(from_file, "rb") as fh:
                data = fh.read(SECRET_MAX_BYTES + 1)
        except OSError as exc:
            raise ValidationError(what, f"cannot read {from_file}: {exc.strerror}") from None
    elif sys.stdin.isatty():
        data = prompt(f"value of {what}").encode()
    else:
        data = sys.stdin.buffer.read(SECRET_MAX_BYTES + 1)
    return decode_secret(data, what)
