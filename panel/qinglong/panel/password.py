"""The local panel's password (docs/panel.md "Signing in"): scrypt from :mod:`hashlib`, one
line ``scrypt$N$r$p$salt$hash`` (base64) in ``panel-password`` inside the data directory,
0600, written and read with ``O_NOFOLLOW``. ``ql3 local web --set-password`` sets it; a
``--listen`` address other than loopback needs it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import ipaddress
import os
import secrets

FILE_NAME = "panel-password"
N, R, P = 2**14, 8, 1  # 16 MiB of memory per check
MIN_LENGTH = 8
MAX_LENGTH = 1024


class PasswordError(ValueError):
    """A password that cannot be set (too short or long) or a file that cannot be read."""


def hash_password(password: str) -> str:
    """The stored form of ``password``. Raises PasswordError for one shorter than 8 or
    longer than 1024 characters."""
    if not MIN_LENGTH <= len(password) <= MAX_LENGTH:
        raise PasswordError(f"the password must be {MIN_LENGTH}-{MAX_LENGTH} characters")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, dklen=32)
    return "$".join(("scrypt", str(N), str(R), str(P), _b64(salt), _b64(digest)))


def verify(stored: str, password: str) -> bool:
    """True when ``password`` matches ``stored`` (constant-time compare); False for a
    malformed stored line or a password too long to check."""
    try:
        kind, n, r, p, salt, digest = stored.strip().split("$")
        if kind != "scrypt" or len(password) > MAX_LENGTH:
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n),
                             r=int(r), p=int(p), dklen=len(expected), maxmem=2**26)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def write(path: str, stored: str) -> None:
    """Replace the password file at ``path`` (0600, never following a link)."""
    tmp = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(stored + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


def read(path: str) -> str | None:
    """The stored line, or None when no password is set. Raises PasswordError when the
    file is a link, not a regular file, or readable by others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PasswordError("the panel password file cannot be opened (a link?)") from exc
    with os.fdopen(fd) as src:
        info = os.fstat(src.fileno())
        if info.st_mode & 0o077 or not os.path.isfile(path):
            raise PasswordError("the panel password file must be a regular file, mode 0600")
        return src.read(4096).strip() or None


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
