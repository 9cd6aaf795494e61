"""SHA-256 without loading OpenSSL where the interpreter has its own implementation.

``hashlib`` loads libcrypto (about 3.5 MiB of RSS measured here), which an edge device pays
for the whole life of ``serve`` just to check a file digest. CPython ships a built-in
SHA-256 (``_sha256`` up to 3.11, ``_sha2`` from 3.12); ``hashlib`` is the fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _constructor() -> Callable[[bytes], Any]:
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # CPython >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]  # CPython 3.11
        except ImportError:
            from hashlib import sha256
    return sha256  # type: ignore[no-any-return]


_SHA256 = _constructor()


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data`` (64 characters)."""
    return str(_SHA256(data).hexdigest())


def digests_equal(a: str, b: str) -> bool:
    """Constant-time comparison of two hex digests."""
    if len(a) != len(b):
        return False
    diff = 0
    for x, y in zip(a.encode(), b.encode(), strict=True):
        diff |= x ^ y
    return diff == 0
