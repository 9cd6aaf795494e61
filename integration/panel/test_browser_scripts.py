"""The local Scripts page in a real browser (docs/panel.md "Scripts"): chromium against a
real `ql3 local serve` and `ql3 local web`; files land in the data directory's scripts
folder through the owner's `scripts_*` socket ops."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_browser import DESKTOP, PHONE, World, _axe_serious, _shot, signed_in_world

from harness import Ql3

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")

CONTENT = "# 京东签到脚本\nprint('签到成功：你好')\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-scripts") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    with signed_in_world(ql3, chromium) as world:
        yield world


def _folder(world: World) -> Path:
    return world.ql3.data_dir / "scripts"


def test_create_edit_and_run_a_chinese_script(world: World) -> None:
    page = world.page("zh-CN")
    page.goto(world.web.base + "/")
    page.get_by_role("link", name="脚本").click()
    page.wait_for_url("**/scripts")
    page.get_by_role("button", name="新建文件").click()
    page.get_by_label("路径").fill("签到.py")
    page.get_by_label("内容").fill(CONTENT)
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/scripts/view?*saved=1")
    assert "已保存" in page.locator("[role=status]").inner_text()
    assert "签到成功：你好" in page.locator("pre").inner_text()
    folder = _folder(world)
    path = folder / "签到.py"
    assert path.read_text(encoding="utf-8") == CONTENT  # LF kept, not the form's CRLF
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    page.get_by_role("button", name="编辑").click()
    page.wait_for_url("**/scripts/edit?*")
    edited = CONTENT + "print('第二行')\n"
    page.get_by_label("内容").fill(edited)
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/scripts/view?*saved=1")
    assert path.read_text(encoding="utf-8") == edited
    page.goto(world.web.base + "/scripts")
    assert page.get_by_role("link", name="签到.py").count() == 1
    # a task runs it by the full path the page shows
    world.ql3.run("local", "task", "add", "签到", "--schedule", "0 8 * * *", "--",
                  "python3", str(path))
    run = world.ql3.json("local", "run", "签到", "--wait")
    assert run["status"] == "succeeded"
    assert "第二行" in world.ql3.run("local", "logs", run["id"]).stdout
    assert world.csp_errors == []


def test_a_save_over_a_changed_file_is_refused_and_the_text_kept(world: World) -> None:
    path = _folder(world) / "冲突.py"
    page = world.page("zh-CN")
    page.goto(world.web.base + "/scripts/new")
    page.get_by_label("路径").fill("冲突.py")
    page.get_by_label("内容").fill("print('原始')\n")
    page.get_by_role("button", name="保存").click()
    page.wait_for_url("**/scripts/view?*saved=1")
    page.get_by_role("button", name="编辑").click()
    page.wait_for_url("**/scripts/edit?*")
    path.write_text("print('别人改的')\n", encoding="utf-8")  # changed behind the editor
    page.get_by_label("内容").fill("print('我的修改')\n")
    with page.expect_response(lambda r: r.url.endswith("/scripts/save")) as answer:
        page.get_by_role("button", name="保存").click()
    assert answer.value.status == 409
    assert "打开后文件已被修改" in page.locator("#script-problem").inner_text()
    assert page.get_by_label("内容").input_value() == "print('我的修改')\n"
    assert path.read_text(encoding="utf-8") == "print('别人改的')\n"
    # "new file" over an existing one is the same refusal
    page.goto(world.web.base + "/scripts/new")
    page.get_by_label("路径").fill("冲突.py")
    page.get_by_label("内容").fill("覆盖")
    page.get_by_role("button", name="保存").click()
    assert page.locator("#script-problem").is_visible()
    assert path.read_text(encoding="utf-8") == "print('别人改的')\n"


def test_paths_out_of_the_folder_are_refused(world: World) -> None:
    page = world.page("en-US")
    page.goto(world.web.base + "/scripts/new")
    page.get_by_label("Path").fill("../escape.py")
    page.get_by_label("Content").fill("print('out')")
    with page.expect_response(lambda r: r.url.endswith("/scripts/save")) as answer:
        page.get_by_role("button", name="Save").click()
    assert answer.value.status == 400
    assert "refused" in page.locator("#script-problem").inner_text()
    data = world.ql3.data_dir
    assert not (data / "escape.py").exists()
    assert not any(p.name == "escape.py" for p in data.rglob("*"))
    for target in ("../ql3.db", "/etc/passwd", "a/../../ql3.db"):
        response = page.goto(world.web.base + "/scripts/view?path=" + target)
        assert response is not None and response.status == 400, target
    # a forged POST without the CSRF token changes nothing
    forged = page.request.post(world.web.base + "/scripts/save", form={
        "path": "forged.py", "content": "x", "version": ""},
        headers={"Origin": world.web.base})
    assert forged.status == 403
    assert not (_folder(world) / "forged.py").exists()


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"])
def test_scripts_pages_pass_axe_at_desktop_and_375px(world: World, locale: str) -> None:
    lang = "zh-CN" if locale == "zh-CN" else "en"
    folder = _folder(world)
    folder.mkdir(mode=0o700, exist_ok=True)
    long = "很长的目录名" * 6
    (folder / long).mkdir(mode=0o700, exist_ok=True)
    (folder / long / "长脚本.js").write_text("console.log('" + "签到" * 200 + "')\n")
    for label, viewport in (("desktop", DESKTOP), ("375px", PHONE)):
        page = world.page(locale, viewport)
        view = f"/scripts/view?path={long}/长脚本.js"
        for name, path in (("scripts", "/scripts"), ("script-new", "/scripts/new"),
                           ("script-view", view), ("script-edit", view.replace(
                               "/view?", "/edit?"))):
            page.goto(world.web.base + path)
            assert page.locator("html").get_attribute("lang") == lang
            assert _axe_serious(page) == [], (name, label)
            if viewport is PHONE:
                assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
            _shot(page, f"{name}-{lang}-{label}")
        page.context.close()
    assert world.csp_errors == []
