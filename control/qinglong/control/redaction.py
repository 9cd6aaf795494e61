"""Secret-free, one-line messages from library errors (ground rules: no secrets in messages).

libpq and botocore sometimes echo what they were given (a connection string with its
password, an endpoint with user-info). ``redact`` cuts a message to its first line, at most
300 characters, without URL user-info, ``password=`` values, or any secret registered with
``remember_secret`` (the CLI registers the database URL and its password).
"""

from __future__ import annotations

import re

_USERINFO = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)[^@\s/\"']*@", re.IGNORECASE)
_PASSWORD_KV = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)
_SECRETS: set[str] = set()
MAX_MESSAGE = 300


def remember_secret(*secrets: str) -> None:
    """Never print these strings again in a redacted message (process-wide)."""
    _SECRETS.update(s for s in secrets if s)


def redact(text: str) -> str:
    """``text`` on one line, without URL user-info, ``password=`` values or known secrets."""
    line = (text.strip().splitlines() or [""])[0]
    for secret in sorted(_SECRETS, key=len, reverse=True):
        line = line.replace(secret, "***")
    line = _USERINFO.sub(r"\g<scheme>***@", line)
    line = _PASSWORD_KV.sub(r"\1***", line)
    return line[:MAX_MESSAGE]
