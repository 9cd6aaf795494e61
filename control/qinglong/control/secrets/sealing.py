"""Sealing secret variable values at rest with AES-GCM (the ``[control]`` extra's
``cryptography``), so a database dump shows no secret value.

A **keyring** names 256-bit keys by id and marks one primary: new values are sealed with the
primary; a value sealed with any key of the ring opens. Rotation: add a key and roll the
replicas, make it primary, re-seal (``needs_reseal``), then remove the old key and roll.

A sealed value is text: ``v1.<key id>.<nonce>.<ciphertext and tag>`` (base64url, no padding;
a fresh 96-bit random nonce per seal). The **associated data** binds it to its place — the
row's id and the variable's name — so a sealed value copied to another task or variable does
not open. Errors name the key id or the place, never a value or key material.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from qinglong.shared.errors import QinglongError

VERSION = "v1"
KEY_BYTES = 32
NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_AAD_PREFIX = b"ql3-secret-v1\0"


class KeyringError(QinglongError):
    """The keyring text is unusable (shape, key id, key length, primary); the message never
    holds key material."""

    code = "keyring_invalid"


class SealError(QinglongError):
    """A sealed value does not open: malformed, sealed with a key id the ring lacks, or
    changed, or moved to another row or variable (the tag does not verify)."""

    code = "secret_unreadable"


def _b64d(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _aad(row_id: str, name: str) -> bytes:
    return _AAD_PREFIX + row_id.encode("utf-8") + b"\0" + name.encode("utf-8")


@dataclass(frozen=True)
class Keyring:
    """Keys by id (``keys``: id -> 32 bytes) and the ``primary`` id new values are sealed
    with. Build it with :meth:`from_json`."""

    keys: Mapping[str, bytes]
    primary: str

    @classmethod
    def from_json(cls, text: str) -> Keyring:
        """Parse ``{"primary": "<id>", "keys": {"<id>": "<base64 of 32 bytes>", ...}}`` (the
        Secret's content). Ids: 1–64 of ``A–Z a–z 0–9 _ -``. Raises KeyringError."""
        try:
            data = json.loads(text)
        except ValueError:
            raise KeyringError("not JSON") from None
        if not isinstance(data, dict) or set(data) != {"primary", "keys"}:
            raise KeyringError('expected {"primary": ..., "keys": {...}}')
        raw, primary = data["keys"], data["primary"]
        if not isinstance(raw, dict) or not raw:
            raise KeyringError("keys must name at least one key")
        keys: dict[str, bytes] = {}
        for key_id, encoded in raw.items():
            if not _KEY_ID.match(key_id):
                raise KeyringError("a key id must be 1–64 of A-Z a-z 0-9 _ -")
            try:
                key = base64.b64decode(str(encoded), validate=True)
            except (binascii.Error, ValueError):
                raise KeyringError(f"key {key_id} is not base64") from None
            if len(key) != KEY_BYTES:
                raise KeyringError(f"key {key_id} must be {KEY_BYTES} bytes")
            keys[key_id] = key
        if primary not in keys:
            raise KeyringError("the primary key id names no key of the ring")
        return cls(keys, primary)

    def seal(self, value: str, *, row_id: str, name: str) -> str:
        """``value`` sealed with the primary key for the variable ``name`` of row
        ``row_id``."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(self.keys[self.primary]).encrypt(
            nonce, value.encode("utf-8"), _aad(row_id, name))
        return ".".join((VERSION, self.primary, _b64e(nonce), _b64e(sealed)))

    def open(self, sealed: str, *, row_id: str, name: str) -> str:
        """The value :meth:`seal` sealed for ``row_id`` and ``name``. Raises SealError."""
        key_id, nonce, body = self._parts(sealed)
        key = self.keys.get(key_id)
        if key is None:
            raise SealError(f"{name}: sealed with key {key_id}, which the keyring lacks")
        try:
            plain = AESGCM(key).decrypt(nonce, body, _aad(row_id, name))
        except InvalidTag:
            raise SealError(f"{name}: does not open: changed, or moved from another "
                            "row or variable") from None
        return plain.decode("utf-8")

    def needs_reseal(self, sealed: str) -> bool:
        """True when ``sealed`` was sealed with a key other than the primary (rotation).
        Raises SealError for a malformed value."""
        return self._parts(sealed)[0] != self.primary

    @staticmethod
    def _parts(sealed: str) -> tuple[str, bytes, bytes]:
        parts = sealed.split(".")
        if len(parts) != 4 or parts[0] != VERSION or not _KEY_ID.match(parts[1]):
            raise SealError("not a sealed value")
        try:
            nonce, body = _b64d(parts[2]), _b64d(parts[3])
        except (binascii.Error, ValueError):
            raise SealError("not a sealed value") from None
        if len(nonce) != NONCE_BYTES or len(body) < 16:
            raise SealError("not a sealed value")
        return parts[1], nonce, body
