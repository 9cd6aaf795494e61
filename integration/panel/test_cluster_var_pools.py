"""The cluster's Variables page (docs/panel.md "Pages", Variables; docs/protocols.md §4.5
"Global variables"): a pool scope set and widened back to every pool, the export (plain
values for every scope, secret ones for an admin who confirms) and an import that adds a
value once. A real ``ql3 control serve`` over PostgreSQL and moto's S3 server
(``integration/cluster``'s ``cluster_kit``), driven by Debian's chromium-headless-shell
through Python playwright, in zh-CN and English.

Screenshots go to ``$QL3_ARTIFACTS_DIR/panel`` (default ``./test-artifacts/panel``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]

CHROMIUM = shutil.which("chromium-headless-shell") or "/usr/bin/chromium-headless-shell"
ARTIFACTS = Path(os.environ.get("QL3_ARTIFACTS_DIR", ROOT / "test-artifacts")) / "panel"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 740}
REMARK = "京东账号一"

if not Path(CHROMIUM).exists():  # scripts/test.sh installs it
    pytest.skip("chromium-headless-shell is not installed (apt-get install "
                "chromium-headless-shell fonts-wqy-microhei)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
pytest.importorskip("moto")
pytest.importorskip("psycopg")

from cluster_kit import ClusterDb, cluster_world  # noqa: E402
from panel_harness import close_contexts  # noqa: E402

from pg_ahead import Ahead  # noqa: E402
from pg_reaper import Reaper  # noqa: E402


@dataclass
class World:
    db: ClusterDb
    base: str  # the panel: http://127.0.0.1:PORT/ui
    api: Any  # an admin API client
    admin: str  # its token
    browser: Any
    tokens: dict[str, str]  # a viewer's and an operator's token too

    def sign_in(self, locale: str, viewport: dict[str, int] = DESKTOP,
                scope: str = "admin") -> Any:
        page = self.browser.new_context(locale=locale, viewport=viewport).new_page()
        page.goto(self.base + "/")
        page.fill("#token", self.tokens[scope])
        page.get_by_role("button", name="登录" if locale == "zh-CN" else "Sign in").click()
        page.wait_for_url(self.base + "/")
        return page


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, moto_session: str,
          cluster_dbs: Ahead[ClusterDb], pg_reaper: Reaper, chromium: Any) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("panel-var-pools")
    with cluster_world(tmp, moto_session, cluster_dbs.take(), reaper=pg_reaper) as cluster:
        db = cluster.db
        admin = cluster.token("admin")
        control = cluster.start_control("c1", lease_ms=30_000, heartbeat_ms=2_000)
        url = str(control.url)
        api = cluster.api(url, admin)
        try:
            tokens = {"admin": admin, "viewer": cluster.token("viewer"),
                      "operator": cluster.token("operator")}
            yield World(db, url + "/ui", api, admin, chromium, tokens)
        finally:
            close_contexts(chromium)
            api.close()


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _environment(db: ClusterDb, pool: str) -> dict[str, str]:
    """What a claim answer gives a worker of ``pool`` (``db/variables.pool_environment``)."""
    from qinglong.control.db.engine import create_engine
    from qinglong.control.db.variables import pool_environment

    engine = create_engine(db.owner_url, pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            return pool_environment(conn, pool)
    finally:
        engine.dispose()


def test_a_value_added_for_pool_jd_shows_its_scope_and_reaches_only_jd(
        world: World) -> None:
    page = world.sign_in("zh-CN")
    page.goto(world.base + "/vars")
    page.fill("#var-name", "JD_UA")
    page.fill("#var-value", "Mozilla/5.0 京东")
    page.fill("#var-remark", REMARK)
    page.fill("#var-pools", "jd")
    page.get_by_role("button", name="保存").click()
    page.wait_for_url(world.base + "/vars")
    row = page.locator("tr", has=page.locator("code", has_text="JD_UA"))
    assert row.locator(".var-pools").inner_text() == "执行池：jd"
    assert REMARK in row.inner_text() and "Mozilla" not in page.content()
    _shot(page, "cluster-var-pools-zh-CN")

    answer = world.api.get("/v1/vars")
    assert answer.status_code == 200, answer.text
    var = next(v for v in answer.json() if v["name"] == "JD_UA")
    assert var["pools"] == ["jd"] and var["values"][0]["remark"] == REMARK
    assert _environment(world.db, "jd") == {"JD_UA": "Mozilla/5.0 京东"}
    assert "JD_UA" not in _environment(world.db, "default")


def test_a_bad_pool_name_is_refused_with_the_rule_in_english_on_a_phone(
        world: World) -> None:
    page = world.sign_in("en", PHONE)
    page.goto(world.base + "/vars")
    page.fill("#var-name", "HK_UA")
    page.fill("#var-value", "x")
    page.fill("#var-pools", "HK!")
    page.get_by_role("button", name="Save").click()
    page.wait_for_url(world.base + "/vars?problem=pools")
    alert = page.get_by_role("alert").inner_text()
    assert "lowercase ASCII letters" in alert and "HK!" not in page.content()
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    _shot(page, "cluster-var-pools-refused-en-375")
    names = [v["name"] for v in world.api.get("/v1/vars").json()]
    assert "HK_UA" not in names  # nothing stored


def _put(world: World, name: str, value: str, **extra: Any) -> None:
    answer = world.api.post(f"/v1/vars/{name}", json={"value": value, **extra})
    assert answer.status_code == 200, answer.text


def _download(page: Any, click: Any) -> str:
    with page.expect_download() as download:
        click()
    return Path(download.value.path()).read_text(encoding="utf-8")


EXPORT_LINK = "导出为 NAME=value 行（不含机密）"
SECRET_COOKIE = "pt_key=秘密AAA;pt_pin=京东"


def test_export_gives_plain_values_and_no_secret_to_an_operator_or_a_viewer(
        world: World) -> None:
    _put(world, "LANG_HINT", '中文提示 "hi" $HOME', secret=False, remark="京东提示")
    _put(world, "JD_COOKIE", SECRET_COOKIE, remark="账号一")  # secret: the API's default
    for scope in ("operator", "viewer"):
        page = world.sign_in("zh-CN", scope=scope)
        page.goto(world.base + "/vars")
        assert page.locator("#export-secrets").count() == 0  # admins only
        exported = _download(page, page.get_by_role("link", name=EXPORT_LINK).click)
        assert '# 京东提示\nLANG_HINT="中文提示 \\"hi\\" \\$HOME"\n' in exported
        assert "JD_COOKIE" not in exported and "秘密" not in exported
        # sh reads the lines back to the same value
        shell = subprocess.run(["sh", "-c", exported + 'printf %s "$LANG_HINT"'],
                               capture_output=True, text=True, check=True)
        assert shell.stdout == '中文提示 "hi" $HOME'
        refused = page.goto(world.base + "/vars/export-secrets")
        assert refused is not None and refused.status == 403
        assert "只有管理员（admin）可以导出机密值。" in page.content()
        assert "秘密" not in page.content()
        page.context.close()


def test_an_admin_exports_secret_values_only_after_confirming(world: World) -> None:
    _put(world, "JD_COOKIE", SECRET_COOKIE, remark="账号一")
    page = world.sign_in("zh-CN")
    page.goto(world.base + "/vars")
    plain = _download(page, page.get_by_role("link", name=EXPORT_LINK).click)
    assert "秘密" not in plain
    page.get_by_role("link", name="导出（含机密值）…").click()
    page.wait_for_url(world.base + "/vars/export-secrets")
    assert page.get_by_role("heading", name="导出机密值").is_visible()
    assert "明文" in page.content() and "秘密" not in page.content()
    _shot(page, "cluster-var-export-confirm-zh-CN")
    everything = _download(
        page, page.get_by_role("button", name="确认导出（含机密值）").click)
    assert '# 账号一\nJD_COOKIE="pt_key=秘密AAA;pt_pin=京东"\n' in everything
    page.context.close()


def test_importing_the_same_lines_twice_adds_them_once_on_a_phone(world: World) -> None:
    page = world.sign_in("zh-CN", PHONE)
    lines = "# 账号一\nJD_IMPORT=ck一号\n# 账号二\nJD_IMPORT=\"ck 二号\"\n"

    def import_lines() -> str:
        page.goto(world.base + "/vars")
        page.get_by_label("每行一个 NAME=value（每行添加一个值）").fill(lines)
        page.get_by_role("button", name="导入", exact=True).click()
        page.wait_for_url("**/vars?*")
        return str(page.get_by_role("status").inner_text())

    assert import_lines() == "已保存 2 个值；0 个已存在，未重复添加；0 个被拒绝。"
    assert import_lines() == "已保存 0 个值；2 个已存在，未重复添加；0 个被拒绝。"
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    _shot(page, "cluster-var-import-twice-zh-CN-375")
    var = next(v for v in world.api.get("/v1/vars").json() if v["name"] == "JD_IMPORT")
    assert [(v["index"], v["remark"]) for v in var["values"]] == [(1, "账号一"), (2, "账号二")]
    assert _environment(world.db, "default")["JD_IMPORT"] == "ck一号&ck 二号"
    page.context.close()


def test_a_scoped_variable_is_widened_back_to_every_pool(world: World) -> None:
    _put(world, "JD_SCOPED", "京东专用", remark="只给 jd", pools=["jd"])
    page = world.sign_in("zh-CN", PHONE)
    page.goto(world.base + "/vars")
    row = page.locator("tr", has=page.locator("code", has_text="JD_SCOPED"))
    assert row.locator(".var-pools").inner_text() == "执行池：jd"
    assert "JD_SCOPED" not in _environment(world.db, "default")
    page.get_by_role("button", name="改为所有执行池 JD_SCOPED").click()
    page.wait_for_url(world.base + "/vars")
    row = page.locator("tr", has=page.locator("code", has_text="JD_SCOPED"))
    assert row.locator(".var-pools").inner_text() == "所有执行池"
    assert row.get_by_role("button", name="改为所有执行池 JD_SCOPED").count() == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    _shot(page, "cluster-var-widened-zh-CN-375")
    var = next(v for v in world.api.get("/v1/vars").json() if v["name"] == "JD_SCOPED")
    assert var["pools"] is None and [v["remark"] for v in var["values"]] == ["只给 jd"]
    assert _environment(world.db, "default")["JD_SCOPED"] == "京东专用"
    assert _environment(world.db, "jd")["JD_SCOPED"] == "京东专用"
    page.context.close()
