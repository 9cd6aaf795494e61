"""Sealing secret values at rest (AES-GCM, control/secrets/sealing.py): round trip, the
place binding (row id and variable name as associated data), tampering, rotation, and a
keyring refused with words that never carry key material."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qinglong.control.secrets.sealing import Keyring, KeyringError, SealError

K1 = base64.b64encode(bytes(range(32))).decode()
K2 = base64.b64encode(bytes(range(32, 64))).decode()
ROW = "01a234c7-2237-71e7-9edb-ee65cd677ebe"


def ring(primary: str = "k1", **keys: str) -> Keyring:
    return Keyring.from_json(json.dumps({"primary": primary, "keys": keys or {"k1": K1}}))


@given(st.text(max_size=200))
def test_a_sealed_value_opens_to_itself_and_never_shows_it(value: str) -> None:
    keys = ring()
    sealed = keys.seal(value, row_id=ROW, name="JD_COOKIE")
    assert keys.open(sealed, row_id=ROW, name="JD_COOKIE") == value
    if len(value) >= 4:
        assert value not in sealed
    assert sealed != keys.seal(value, row_id=ROW, name="JD_COOKIE")  # a fresh nonce


def test_a_value_moved_to_another_row_or_variable_does_not_open() -> None:
    keys = ring()
    sealed = keys.seal("pt_key=京东密钥", row_id=ROW, name="JD_COOKIE")
    with pytest.raises(SealError, match="another row or variable") as caught:
        keys.open(sealed, row_id=ROW.replace("a", "b"), name="JD_COOKIE")
    assert "京东" not in str(caught.value)
    with pytest.raises(SealError):
        keys.open(sealed, row_id=ROW, name="OTHER")


def test_a_changed_value_does_not_open() -> None:
    keys = ring()
    sealed = keys.seal("secret", row_id=ROW, name="A")
    head, tail = sealed.rsplit(".", 1)
    flipped = tail[:-2] + ("A" if tail[-2] != "A" else "B") + tail[-1]
    with pytest.raises(SealError):
        keys.open(f"{head}.{flipped}", row_id=ROW, name="A")
    for junk in ("", "v1", "v0.k1.AAAA.AAAA", "v1.k1.!!.AAAA", "plain text"):
        with pytest.raises(SealError, match="not a sealed value"):
            keys.open(junk, row_id=ROW, name="A")


def test_rotation_opens_old_values_and_marks_them_for_resealing() -> None:
    old = ring()
    sealed = old.seal("v", row_id=ROW, name="A")
    rotated = ring("k2", k1=K1, k2=K2)
    assert rotated.open(sealed, row_id=ROW, name="A") == "v"
    assert rotated.needs_reseal(sealed)
    fresh = rotated.seal("v", row_id=ROW, name="A")
    assert not rotated.needs_reseal(fresh)
    with pytest.raises(SealError, match="key k2, which the keyring lacks"):
        old.open(fresh, row_id=ROW, name="A")


@pytest.mark.parametrize(("text", "words"), [
    ("nope", "not JSON"),
    (json.dumps({"keys": {"k1": K1}}), "expected"),
    (json.dumps({"primary": "k1", "keys": {}}), "at least one key"),
    (json.dumps({"primary": "k1", "keys": {"k 1": K1}}), "key id"),
    (json.dumps({"primary": "k1", "keys": {"k1": "not base64!"}}), "not base64"),
    (json.dumps({"primary": "k1", "keys": {"k1": base64.b64encode(b"short").decode()}}),
     "32 bytes"),
    (json.dumps({"primary": "k9", "keys": {"k1": K1}}), "primary"),
])
def test_a_bad_keyring_is_refused_without_key_material(text: str, words: str) -> None:
    with pytest.raises(KeyringError, match=words) as caught:
        Keyring.from_json(text)
    assert K1 not in str(caught.value)
