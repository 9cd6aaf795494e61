"""The built-in SHA-256 helper agrees with hashlib."""

from __future__ import annotations


def test_builtin_sha256_matches_hashlib() -> None:
    import hashlib

    from qinglong.shared.digest import digests_equal, sha256_hex

    for data in (b"", b"abc", bytes(range(256)) * 100):
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()
    assert digests_equal("ab", "ab") and not digests_equal("ab", "ac")
    assert not digests_equal("ab", "abc")
