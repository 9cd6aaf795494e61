"""The storage shape of sealed secret values (control/qinglong/control/secrets/store.py):
a secret entry keeps ``{"secret": true}`` and no value, its value sealed under its own
name and the row's id; non-secret entries pass as they are; opening restores the entry."""

from __future__ import annotations

import base64
import json
import os

import pytest

from qinglong.control.secrets.sealing import Keyring, SealError
from qinglong.control.secrets.store import SecretsKeyMissingError, opened_env, seal_env

ROW = "01a234f7-fbb2-7163-8b35-c7746bdf7fd4"


def ring(primary: str = "k1", **keys: bytes) -> Keyring:
    keys = keys or {"k1": os.urandom(32)}
    return Keyring.from_json(json.dumps({"primary": primary, "keys": {
        k: base64.b64encode(v).decode() for k, v in keys.items()}}))


def test_a_secret_leaves_no_value_in_the_stored_entry_and_opens_back() -> None:
    keyring = ring()
    env = {"API_KEY": {"value": "秘密-cookie", "secret": True},
           "REGION": {"value": "cn-north", "secret": False}}
    stored, sealed = seal_env(keyring, ROW, env)
    assert stored == {"API_KEY": {"secret": True},
                      "REGION": {"value": "cn-north", "secret": False}}
    assert set(sealed) == {"API_KEY"} and "秘密" not in sealed["API_KEY"]
    assert opened_env(keyring, ROW, stored, sealed) == env


def test_a_sealed_value_moved_to_another_row_does_not_open() -> None:
    keyring = ring()
    stored, sealed = seal_env(keyring, ROW, {"A": {"value": "v", "secret": True}})
    with pytest.raises(SealError):
        opened_env(keyring, "01a234f7-fbb2-7163-8b35-000000000000", stored, sealed)


def test_sealed_values_need_a_keyring_plain_rows_do_not() -> None:
    stored, sealed = seal_env(ring(), ROW, {"A": {"value": "v", "secret": True}})
    with pytest.raises(SecretsKeyMissingError):
        opened_env(None, ROW, stored, sealed)
    plain = {"A": {"value": "v", "secret": True}}
    assert opened_env(None, ROW, plain, None) == plain


def test_a_variable_value_opens_under_its_own_name_only() -> None:
    from qinglong.control.secrets.store import opened_variable_value, variable_row_id

    keyring = ring()
    sealed = keyring.seal("pt_key=甲;", row_id=variable_row_id("JD_COOKIE"), name="JD_COOKIE")
    assert opened_variable_value(keyring, "JD_COOKIE", "", sealed) == "pt_key=甲;"
    with pytest.raises(SealError):  # copied to another variable
        opened_variable_value(keyring, "OTHER", "", sealed)
    with pytest.raises(SecretsKeyMissingError):
        opened_variable_value(None, "JD_COOKIE", "", sealed)
    assert opened_variable_value(None, "JD_COOKIE", "plain", None) == "plain"


def test_a_channel_url_opens_for_its_own_channel_only() -> None:
    from qinglong.control.notify import channel_url
    from qinglong.control.secrets.store import CHANNEL_NAME, channel_row_id, opened_channel_url

    keyring = ring()
    url = "tgram://123456:AAH-bot-令牌/998877"
    sealed = keyring.seal(url, row_id=channel_row_id(ROW), name=CHANNEL_NAME)
    assert "令牌" not in sealed and "AAH" not in sealed
    assert opened_channel_url(keyring, ROW, "", sealed) == url
    assert opened_channel_url(None, ROW, url, None) == url  # plain: no keyring needed
    with pytest.raises(SealError):  # copied to another channel
        opened_channel_url(keyring, "01a234f7-fbb2-7163-8b35-000000000000", "", sealed)
    with pytest.raises(SecretsKeyMissingError):
        opened_channel_url(None, ROW, "", sealed)
    # delivery: a sealed URL that does not open is a failure class, never a URL
    assert channel_url(keyring, {"channel_id": ROW, "url": "", "sealed_url": sealed}) == url
    assert channel_url(None, {"id": ROW, "url": "", "sealed_url": sealed}) is None
