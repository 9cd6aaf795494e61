"""A secret value as typed or piped in (issue 12 item 7): never from argv, checked here
without ever echoing it. Shared by ``ql3 local`` (``vars set``, ``--secret-env``) and
``ql3 cluster task add|edit --secret-env``. Stdlib only: reading a terminal prompt stays with
each command line."""

from __future__ import annotations

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
