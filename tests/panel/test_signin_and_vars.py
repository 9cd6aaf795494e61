"""Password sign-in (scrypt) and the Variables page's rules over a fake backend
(docs/panel.md "Signing in", "Security", "Pages"): a wrong password changes nothing, a
password sign-in renews the session, changing variables needs a sign-in within 15 minutes,
secret values never reach a page or the export."""

from __future__ import annotations

import os
import stat
import time
import warnings
from pathlib import Path
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from qinglong.panel import password
from qinglong.panel.app import create_app
from qinglong.panel.backend import FEATURES, VAR_POOLS, BackendRefusedError
from qinglong.panel.security import Sessions

BASE = "http://testserver"
EVIL = "<script>alert(1)</script>"


class VarsBackend:
    profile = "local"
    features = FEATURES

    def __init__(self) -> None:
        self.vars: dict[str, dict[str, Any]] = {
            "JD_COOKIE": {"secret": True, "values": ["pt_key=秘密"]},
            "UA": {"secret": False, "values": [EVIL, "第二个"]},
        }
        self.calls: list[tuple[str, Any]] = []

    def available(self) -> bool:
        return True

    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        return {"tasks": [], "total": 0, "offset": offset, "limit": limit}

    def vars_list(self) -> list[dict[str, Any]]:
        return [{"name": n, "secret": v["secret"], "source": "manual",
                 "enabled": len(v["values"]),
                 "values": [{"index": i + 1, "remark": "备注", "enabled": True,
                             "updated_at": None} for i in range(len(v["values"]))]}
                for n, v in sorted(self.vars.items())]

    def vars_reveal(self, name: str) -> dict[str, Any]:
        view = next(v for v in self.vars_list() if v["name"] == name)
        if view["secret"]:
            raise BackendRefusedError("conflict", "secret")
        for item, value in zip(view["values"], self.vars[name]["values"], strict=True):
            item["value"] = value
        return view

    def vars_set(self, name: str, value: str, *, remark: str | None, add: bool,
                 secret: bool | None) -> dict[str, Any]:
        self.calls.append(("vars_set", (name, value, add, secret)))
        entry = self.vars.setdefault(name, {"secret": bool(secret), "values": []})
        entry["values"] = [*entry["values"], value] if add else [value]
        return {"name": name, "index": len(entry["values"]), "changed": True}

    def vars_enable(self, name: str, index: int | None, enabled: bool) -> dict[str, Any]:
        self.calls.append(("vars_enable", (name, index, enabled)))
        return {}

    def vars_remove(self, name: str, index: int | None) -> dict[str, Any]:
        self.calls.append(("vars_remove", (name, index)))
        return {}


def _client(stored: str | None = None) -> tuple[TestClient, VarsBackend, Sessions]:
    backend = VarsBackend()
    sessions = Sessions("one-time")
    return TestClient(create_app(backend, sessions, stored), base_url=BASE), backend, sessions


def _csrf(text: str) -> str:
    return text.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_scrypt_hash_verifies_only_the_same_password() -> None:
    stored = password.hash_password("正确的密码123")
    assert stored.startswith("scrypt$16384$8$1$")
    assert password.verify(stored, "正确的密码123")
    assert not password.verify(stored, "正确的密码124")
    assert not password.verify("garbage", "x")
    assert password.hash_password("正确的密码123") != stored  # salted
    with pytest.raises(password.PasswordError):
        password.hash_password("short")


def test_the_password_file_is_0600_and_a_link_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / password.FILE_NAME)
    assert password.read(path) is None
    password.write(path, password.hash_password("abcdefgh"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert password.verify(password.read(path) or "", "abcdefgh")
    os.chmod(path, 0o644)
    with pytest.raises(password.PasswordError):
        password.read(path)
    link = str(tmp_path / "link")
    os.symlink(path, link)
    with pytest.raises(password.PasswordError):
        password.read(link)
    assert password.is_loopback("127.0.0.1") and password.is_loopback("::1")
    assert not password.is_loopback("0.0.0.0") and not password.is_loopback("192.168.1.2")


def test_password_sign_in_renews_the_session_and_a_wrong_one_is_refused() -> None:
    client, _, _ = _client(password.hash_password("abcdefgh"))
    page = client.get("/signin")
    assert page.status_code == 200 and 'type="password"' in page.text
    wrong = client.post("/signin", data={"password": "nope-nope"}, headers={"Origin": BASE},
                        follow_redirects=False)
    assert wrong.status_code == 403 and "密码错误" in wrong.text
    assert client.get("/").status_code == 401
    no_origin = client.post("/signin", data={"password": "abcdefgh"}, follow_redirects=False)
    assert no_origin.status_code == 403
    ok = client.post("/signin?next=/vars", data={"password": "abcdefgh"},
                     headers={"Origin": BASE}, follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"] == "/vars"
    assert "HttpOnly" in ok.headers["set-cookie"]
    assert client.get("/").status_code == 200
    away = client.post("/signin?next=//evil.example", data={"password": "abcdefgh",
                                                            "csrf": _csrf(client.get("/").text)},
                       headers={"Origin": BASE}, follow_redirects=False)
    assert away.headers["location"] == "/"


def test_secret_values_never_reach_the_page_or_the_export() -> None:
    client, _, _ = _client()
    client.get("/signin?token=one-time")
    page = client.get("/vars").text
    assert "JD_COOKIE" in page and "秘密" not in page and "********" in page
    assert "第二个" in page and EVIL not in page and "&lt;script&gt;" in page
    export = client.get("/vars/export.txt").text
    # each value after its remark, quoted as sh reads it back (docs/panel.md "Variables")
    assert export == f'# 备注\nUA="{EVIL}"\n# 备注\nUA=第二个\n'


def test_changing_variables_needs_a_sign_in_within_15_minutes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    client, backend, _ = _client()
    client.get("/signin?token=one-time")
    csrf = _csrf(client.get("/vars").text)
    form = {"csrf": csrf, "action": "add", "name": "NEW", "value": "v", "secret": "on"}
    added = client.post("/vars", data=form, headers={"Origin": BASE}, follow_redirects=False)
    assert added.status_code == 303 and backend.calls == [("vars_set", ("NEW", "v", False,
                                                                        True))]
    later = time.monotonic() + 16 * 60
    monkeypatch.setattr("qinglong.panel.security.time.monotonic", lambda: later)
    stale = client.post("/vars", data=form, headers={"Origin": BASE}, follow_redirects=False)
    assert stale.status_code == 401 and "15" in stale.text
    imported = client.post("/vars/import", data={"csrf": csrf, "lines": "A=1"},
                           headers={"Origin": BASE}, follow_redirects=False)
    assert imported.status_code == 401
    assert len(backend.calls) == 1  # nothing changed after the window
    assert client.get("/vars").status_code == 200  # reading stays allowed


def test_import_adds_one_value_per_line_and_counts_refusals() -> None:
    client, backend, _ = _client()
    client.get("/signin?token=one-time")
    csrf = _csrf(client.get("/vars").text)
    reply = client.post("/vars/import", headers={"Origin": BASE}, follow_redirects=False,
                        data={"csrf": csrf, "lines": "A=1\n# note\nexport B=二\nbad line\n"})
    assert reply.headers["location"] == "/vars?done=2&same=0&failed=1"
    assert [c[1][:3] for c in backend.calls] == [("A", "1", True), ("B", "二", True)]


def test_the_add_forms_secret_box_starts_ticked_and_a_refusal_keeps_it_as_sent() -> None:
    """A new value is secret unless the user unticks 机密, as ``vars set`` is secret unless
    ``--plain``; a refused form comes back with the box as it was sent."""
    client, _, _ = _client()
    client.get("/signin?token=one-time")
    page = client.get("/vars").text

    def box(html: str) -> str:
        form = html[html.index('class="var-form"'):]
        return form[form.index('name="secret"'):].split(">", 1)[0]

    assert "checked" in box(page)
    refused = client.post("/vars", headers={"Origin": BASE}, data={
        "csrf": _csrf(page), "action": "add", "name": "NEW", "value": ""})
    assert refused.status_code == 400 and "checked" not in box(refused.text)


def test_an_unticked_secret_box_never_makes_a_secret_variable_plain() -> None:
    """Adding to or importing into secret JD_COOKIE without the 机密 box keeps it secret
    (else its values would become readable and exported); a new name stays plain."""
    client, backend, _ = _client()
    client.get("/signin?token=one-time")
    csrf = _csrf(client.get("/vars").text)
    client.post("/vars", headers={"Origin": BASE}, follow_redirects=False, data={
        "csrf": csrf, "action": "add", "name": "JD_COOKIE", "value": "pt_key=二号",
        "another": "on"})
    client.post("/vars/import", headers={"Origin": BASE}, follow_redirects=False,
                data={"csrf": csrf, "lines": "JD_COOKIE=pt_key=三号\nNEW_PLAIN=1\n"})
    assert [c[1] for c in backend.calls if c[0] == "vars_set"] == [
        ("JD_COOKIE", "pt_key=二号", True, True), ("JD_COOKIE", "pt_key=三号", True, True),
        ("NEW_PLAIN", "1", True, False)]
class PoolVarsBackend(VarsBackend):
    """The cluster's shape: ``var_pools`` in features, each variable with its ``pools``."""

    features = FEATURES | {VAR_POOLS}

    def __init__(self) -> None:
        super().__init__()
        self.pools: dict[str, list[str] | None] = {}

    def vars_list(self) -> list[dict[str, Any]]:
        return [{**v, "pools": self.pools.get(v["name"])} for v in super().vars_list()]

    def vars_set(self, name: str, value: str, *, remark: str | None, add: bool,
                 secret: bool | None, pools: list[str] | None = None) -> dict[str, Any]:
        if pools is not None and not all(p.islower() and p.isalnum() for p in pools):
            raise BackendRefusedError("invalid_pool", "pools: use lowercase", usage=True)
        self.calls.append(("vars_set_pools", (name, pools)))
        if pools is not None:
            self.pools[name] = pools
        return super().vars_set(name, value, remark=remark, add=add, secret=secret)


def test_a_value_added_with_pools_sets_the_scope_and_a_bad_pool_says_the_rule() -> None:
    backend = PoolVarsBackend()
    client = TestClient(create_app(backend, Sessions("one-time"), None), base_url=BASE)
    client.get("/signin?token=one-time")
    page = client.get("/vars", headers={"Accept-Language": "en"}).text
    assert 'name="pools"' in page and "Every pool" in page
    csrf = _csrf(page)
    form = {"csrf": csrf, "action": "add", "name": "JD_UA", "value": "v", "remark": "京东",
            "pools": "jd, hk"}
    added = client.post("/vars", data=form, headers={"Origin": BASE}, follow_redirects=False)
    assert added.status_code == 303 and added.headers["location"] == "/vars"
    assert ("vars_set_pools", ("JD_UA", ["jd", "hk"])) in backend.calls
    assert "Pools: jd, hk" in client.get("/vars", headers={"Accept-Language": "en"}).text
    kept = client.post("/vars", data={**form, "pools": "  ", "another": "on"},
                       headers={"Origin": BASE}, follow_redirects=False)
    assert kept.status_code == 303 and backend.calls[-2] == ("vars_set_pools",
                                                             ("JD_UA", None))
    assert backend.pools["JD_UA"] == ["jd", "hk"]  # empty keeps the scope
    bad = client.post("/vars", data={**form, "pools": "JD!"}, headers={"Origin": BASE},
                      follow_redirects=False)
    assert bad.status_code == 303 and bad.headers["location"] == "/vars?problem=pools"
    zh = client.get(bad.headers["location"], headers={"Accept-Language": "zh-CN"}).text
    assert "执行池须为 1 到 64 个名称" in zh and "执行池：jd, hk" in zh


def test_a_backend_without_pools_shows_no_pool_field() -> None:
    client, backend, _ = _client()
    client.get("/signin?token=one-time")
    page = client.get("/vars").text
    assert 'name="pools"' not in page
    form = {"csrf": _csrf(page), "action": "add", "name": "A", "value": "v", "pools": "jd"}
    client.post("/vars", data=form, headers={"Origin": BASE}, follow_redirects=False)
    assert backend.calls == [("vars_set", ("A", "v", False, False))]
