"""Exporting the cluster's global variables, adding a value once, and setting a variable's
pool scope alone, through the real HTTP API over PostgreSQL as the runtime role
(docs/protocols.md §4.5 "Global variables"; docs/panel.md "Pages", Variables).

- ``GET /v1/vars/export``: the plain variables' enabled one-line values as ``NAME=value``
  lines (remarks as ``# remark`` lines, shell quoting), which the import reads back to the
  same values; secret values only for an admin asking ``include_secrets=true`` (a viewer or
  operator asking is 403 and gets none), opened when sealed, refused without a keyring.
- ``POST /v1/vars/{name}`` with ``add``: a value the variable already holds (enabled or not)
  is not added again (``changed`` 0, its index).
- ``POST /v1/vars/{name}/pools``: ``null`` widens a scoped variable back to every pool
  with its values untouched; a narrower list scopes it again; refusals change nothing.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from qinglong.control.db.variables import pool_environment
from qinglong.control.secrets.sealing import Keyring
from qinglong.panel.var_lines import parse_lines

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

SECRET = "pt_key=秘密AAA;pt_pin=京东"
UA = "Mozilla/5.0 京东"
HINT = '中文提示 "hi" $HOME `x` \\n'


def _set(api: Any, name: str, value: str, **extra: Any) -> dict[str, Any]:
    answer = api.client.post(f"/v1/vars/{name}", json={"value": value, **extra},
                             headers=api.as_("operator"))
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def _export(api: Any, scope: str, **params: Any) -> Any:
    return api.client.get("/v1/vars/export", params=params, headers=api.as_(scope))


def _environment(api: Any, pool: str) -> dict[str, str]:
    with api.owner.connect() as conn:
        return pool_environment(conn, pool, keyring=api.ctx.extras.get("keyring"))


def _seed(api: Any) -> None:
    _set(api, "JD_UA", UA, secret=False, remark="京东账号一")
    _set(api, "JD_UA", "ua-2", secret=False, add=True)
    _set(api, "JD_UA", "ua-off", secret=False, add=True, remark="停用")
    off = api.client.post("/v1/vars/JD_UA/disable", json={"index": 3},
                          headers=api.as_("operator"))
    assert off.status_code == 200, off.text
    _set(api, "LANG_HINT", HINT, secret=False)
    _set(api, "MULTI_LINE", "第一行\n第二行", secret=False)
    _set(api, "JD_COOKIE", SECRET, remark="账号一")  # secret: the default


def test_export_gives_plain_values_as_lines_and_secrets_only_to_an_admin_who_asks(
        api: Any) -> None:
    _seed(api)
    plain = ('# 京东账号一\nJD_UA="Mozilla/5.0 京东"\nJD_UA=ua-2\n'
             'LANG_HINT="中文提示 \\"hi\\" \\$HOME \\`x\\` \\\\n"\n')
    for scope in ("viewer", "operator", "admin"):
        answer = _export(api, scope)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "text/plain; charset=utf-8"
        assert answer.headers["cache-control"] == "no-store"
        assert answer.text == plain  # disabled, multi-line and secret values left out
    # the lines read back to the same values and remarks (the panel's import)
    assert parse_lines(plain.splitlines()) == [
        ("JD_UA", UA, "京东账号一"), ("JD_UA", "ua-2", None), ("LANG_HINT", HINT, None)]

    for scope in ("viewer", "operator"):
        refused = _export(api, scope, include_secrets="true")
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"
        assert "秘密" not in refused.text and "Mozilla" not in refused.text

    everything = _export(api, "admin", include_secrets="true")
    assert everything.status_code == 200, everything.text
    assert everything.text == plain.replace(
        "# 京东账号一", '# 账号一\nJD_COOKIE="pt_key=秘密AAA;pt_pin=京东"\n# 京东账号一')
    assert ("JD_COOKIE", SECRET, "账号一") in parse_lines(everything.text.splitlines())


def test_a_sealed_secret_is_exported_opened_and_not_without_the_keyring(api: Any) -> None:
    api.ctx.extras["keyring"] = Keyring({"k1": os.urandom(32)}, "k1")
    api.sql("INSERT INTO secret_sealing (primary_key_id, enabled_by) VALUES ('k1', 'test')")
    _set(api, "JD_COOKIE", SECRET, remark="账号一")
    stored = api.sql("SELECT value, sealed_value FROM global_variable_values"
                     " WHERE name = 'JD_COOKIE'")
    assert stored[0][0] == "" and stored[0][1] and "秘密" not in stored[0][1]
    # adding the same value again compares it opened: nothing is added
    again = _set(api, "JD_COOKIE", SECRET, add=True)
    assert (again["index"], again["changed"]) == (1, 0)

    answer = _export(api, "admin", include_secrets="true")
    assert answer.status_code == 200, answer.text
    assert answer.text == '# 账号一\nJD_COOKIE="pt_key=秘密AAA;pt_pin=京东"\n'
    assert _export(api, "viewer").text == ""  # nothing plain; nothing sealed is read

    del api.ctx.extras["keyring"]
    missing = _export(api, "admin", include_secrets="true")
    assert missing.status_code == 503, missing.text
    assert missing.json()["error"]["code"] == "secrets_key_missing"
    assert "秘密" not in missing.text


def test_adding_a_value_already_held_adds_nothing(api: Any) -> None:
    first = _set(api, "JD_COOKIE", "ck一号", remark="账号一")
    second = _set(api, "JD_COOKIE", "ck二号", add=True, remark="账号二")
    assert (first["index"], first["changed"]) == (1, 1)
    assert (second["index"], second["changed"]) == (2, 1)
    for value, index in (("ck一号", 1), ("ck二号", 2)):
        again = _set(api, "JD_COOKIE", value, add=True, remark="又一次")
        assert (again["index"], again["changed"]) == (index, 0)
    # a disabled value is held too
    off = api.client.post("/v1/vars/JD_COOKIE/disable", json={"index": 2},
                          headers=api.as_("operator"))
    assert off.status_code == 200, off.text
    assert _set(api, "JD_COOKIE", "ck二号", add=True)["changed"] == 0
    listed = api.client.get("/v1/vars", headers=api.as_("viewer")).json()
    (jd,) = [v for v in listed if v["name"] == "JD_COOKIE"]
    assert [(v["index"], v["remark"], v["enabled"]) for v in jd["values"]] == [
        (1, "账号一", True), (2, "账号二", False)]
    assert _environment(api, "default") == {"JD_COOKIE": "ck一号"}
    # a different value is still added, and a plain set still replaces
    assert _set(api, "JD_COOKIE", "ck三号", add=True)["index"] == 3
    assert _set(api, "JD_COOKIE", "ck一号")["changed"] == 1
    assert _environment(api, "default") == {"JD_COOKIE": "ck一号"}


def test_an_empty_value_is_refused_and_changes_nothing(api: Any) -> None:
    """An empty value is refused (422 ``invalid_variable``) whether it would replace, be
    added or replace value #1, as the local owner and both profiles' ``vars set`` refuse it;
    the variable keeps its one value."""
    _set(api, "JD_UA", UA, secret=False)
    for extra in ({}, {"add": True}, {"index": 1}):
        refused = api.client.post("/v1/vars/JD_UA", json={"value": "", **extra},
                                  headers=api.as_("operator"))
        assert refused.status_code == 422, (extra, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "invalid_variable" and "empty" in error["message"], error
    refused = api.client.post("/v1/vars/NEW_ONE", json={"value": ""},
                              headers=api.as_("operator"))
    assert refused.status_code == 422, refused.text
    assert _environment(api, "default").get("JD_UA") == UA
    listed = api.client.get("/v1/vars", headers=api.as_("viewer")).json()
    assert [v["name"] for v in listed] == ["JD_UA"], listed
    assert len(listed[0]["values"]) == 1, listed


def test_the_pools_route_sets_the_scope_alone_and_widens_it_to_every_pool(
        api: Any) -> None:
    _set(api, "JD_UA", UA, remark="京东账号一", pools=["jd"])
    assert _environment(api, "jd") == {"JD_UA": UA}
    assert "JD_UA" not in _environment(api, "default")

    def scope(body: Any, who: str = "operator") -> Any:
        return api.client.post("/v1/vars/JD_UA/pools", json=body, headers=api.as_(who))

    for body, who, status in (({"pools": None}, "viewer", 403), ({}, "operator", 422),
                              ({"pools": []}, "operator", 422),
                              ({"pools": ["京东"]}, "operator", 422),
                              ({"pools": None, "value": "x"}, "operator", 422)):
        refused = scope(body, who)
        assert refused.status_code == status, (body, who, refused.text)
    missing = api.client.post("/v1/vars/NO_SUCH/pools", json={"pools": None},
                              headers=api.as_("operator"))
    assert missing.status_code == 404, missing.text
    assert api.client.get("/v1/vars", headers=api.as_("viewer")).json()[0]["pools"] == ["jd"]

    widened = scope({"pools": None})
    assert widened.status_code == 200, widened.text
    assert widened.json() == {"name": "JD_UA", "pools": None}
    (var,) = api.client.get("/v1/vars", headers=api.as_("viewer")).json()
    assert var["pools"] is None and var["updated_by"] == "operator-token"
    assert [(v["index"], v["remark"]) for v in var["values"]] == [(1, "京东账号一")]
    assert _environment(api, "default") == {"JD_UA": UA} == _environment(api, "jd")

    narrowed = scope({"pools": ["jd", "jd-backup"]})
    assert narrowed.json() == {"name": "JD_UA", "pools": ["jd", "jd-backup"]}
    assert "JD_UA" not in _environment(api, "default")
    assert _environment(api, "jd-backup") == {"JD_UA": UA}


def test_widening_past_a_pools_one_mib_is_refused_and_changes_nothing(api: Any) -> None:
    big = "京" * 40_000  # 120,000 bytes a value
    for n in range(4):
        _set(api, f"WIDE_{n}", big)  # every pool: 480,000 bytes
        _set(api, f"HK_{n}", big, pools=["hk"])  # pool hk: 960,000 bytes with them
    _set(api, "BIG_0", big, pools=["jd"])
    refused = api.client.post("/v1/vars/BIG_0/pools", json={"pools": None},
                              headers=api.as_("operator"))  # hk would pass 1 MiB
    assert refused.status_code == 422, refused.text
    assert refused.json()["error"]["code"] == "invalid_variable" and "京" not in refused.text
    listed = api.client.get("/v1/vars", headers=api.as_("viewer")).json()
    assert next(v for v in listed if v["name"] == "BIG_0")["pools"] == ["jd"]
    assert "BIG_0" not in _environment(api, "hk")
