"""The Variables page (环境变量) in a real browser (docs/panel.md "Variables"): Debian's
chromium-headless-shell through playwright, against a real `ql3 local serve` and
`ql3 local web`.

A refused value says which rule it broke, in the page's language, and keeps what was typed;
a secret variable's values are masked in every task's log without a ``--secret-env``
reference; export then import gives back the same values and remarks, never twice.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_browser import PHONE, World, _axe_serious, _shot, signed_in_world

from harness import QL3, Ql3

pytestmark = pytest.mark.integration
sync_api = pytest.importorskip("playwright.sync_api")

COOKIE = "pt_key=AAA111;pt_pin=user1;"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, chromium: Any) -> Iterator[World]:
    data = tmp_path_factory.mktemp("panel-vars") / "data"
    ql3 = Ql3(data)
    ql3.run("local", "init", "--data-dir", str(data), "--profile", "standalone")
    with signed_in_world(ql3, chromium) as world:
        yield world


def _set(ql3: Ql3, name: str, value: str, *options: str) -> None:
    done = subprocess.run([QL3, "local", "vars", "set", name, *options], input=value,
                          env=ql3.env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def _fill(page: object, label: str, value: str) -> None:
    """Set a field's value as pasted (a script sets it: ``maxlength`` does not cut it, as a
    request made without the page would not be)."""
    field = page.get_by_label(label, exact=True)  # type: ignore[attr-defined]
    field.evaluate("(el, v) => { el.value = v; }", value)


@pytest.mark.parametrize(("name", "remark", "value", "zh", "en"), [
    ("PATH", "", COOKIE, "PATH 不能作为环境变量", "PATH cannot be a global variable"),
    ("N" * 5000, "", COOKIE, "名称为 1-128 个字母", "a variable name is 1-128 letters"),
    ("JD_COOKIE", "备" * 5000, COOKIE, "备注最多 200 个字符", "a remark is at most 200"),
    ("JD_COOKIE", "", "x" * 200_000, "NAME=value 最多 128 KiB", "at most 128 KiB"),
    ("EMPTYV", "京东账号", "", "被拒绝：值为空", "Refused: the value is empty"),
], ids=["reserved-name", "long-name", "long-remark", "200KB-value", "empty-value"])
def test_a_refused_value_names_its_rule_and_keeps_what_was_typed(
    world: World, name: str, remark: str, value: str, zh: str, en: str
) -> None:
    for locale, expected in (("zh-CN", zh), ("en-US", en)):
        page = world.page(locale)
        page.goto(world.web.base + "/vars")
        labels = ("名称", "值", "备注") if locale == "zh-CN" else ("Name", "Value", "Remark")
        for label, text in zip(labels, (name, value, remark), strict=True):
            _fill(page, label, text)
        page.locator("form.var-form button[type=submit]").click()
        alert = page.locator(".var-refusal")
        alert.wait_for(timeout=20_000)
        assert expected in alert.inner_text()
        assert "请检查名称" not in page.content() and "check the name" not in page.content()
        assert page.get_by_label(labels[0], exact=True).input_value() == name
        assert page.get_by_label(labels[1], exact=True).input_value() == value
        assert page.get_by_label(labels[2], exact=True).input_value() == remark
    assert world.ql3.json("local", "vars", "list") == []


def test_a_refusal_reads_on_a_phone_and_passes_axe(world: World) -> None:
    page = world.page("zh-CN", PHONE)
    page.goto(world.web.base + "/vars")
    _fill(page, "名称", "LD_PRELOAD")
    _fill(page, "值", COOKIE)
    page.locator("form.var-form button[type=submit]").click()
    page.locator(".var-refusal").wait_for(timeout=20_000)
    assert "LD_PRELOAD 不能作为环境变量" in page.locator(".var-refusal").inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    assert _axe_serious(page) == []
    _shot(page, "vars-refused-zh-CN-375px")


def test_a_secret_variable_is_masked_in_the_run_page_and_logs(world: World) -> None:
    """JD_COOKIE added as secret on the page, PUSH_TOKEN by `vars set --secret`: a task that
    prints them without any --secret-env shows ``***`` in the panel's log and in `logs`."""
    page = world.page("zh-CN")
    page.goto(world.web.base + "/vars")
    page.get_by_label("名称", exact=True).fill("JD_COOKIE")
    page.get_by_label("值", exact=True).fill(COOKIE)
    page.get_by_label("机密（保存后不再显示值）").check()
    page.locator("form.var-form button[type=submit]").click()
    page.wait_for_url("**/vars")
    _set(world.ql3, "PUSH_TOKEN", "globalsecret999", "--secret")
    world.ql3.run("local", "task", "add", "print-globals", "--schedule", "@once", "--",
                  "sh", "-c", 'echo "JD_COOKIE=$JD_COOKIE"; echo tok=$PUSH_TOKEN')
    page.goto(world.web.base + "/")
    page.get_by_role("button", name="运行 print-globals").click()
    page.wait_for_url("**/runs/*")
    page.locator("#log[data-done='true']").wait_for(timeout=30_000)
    log = page.locator("#log").inner_text()
    assert "JD_COOKIE=***" in log and "tok=***" in log
    assert "AAA111" not in page.content() and "globalsecret999" not in page.content()
    logs = world.ql3.run("local", "logs", "print-globals@last").stdout
    assert logs == "JD_COOKIE=***\ntok=***\n"
    world.ql3.run("local", "vars", "rm", "JD_COOKIE")
    world.ql3.run("local", "vars", "rm", "PUSH_TOKEN")


def test_export_then_import_gives_back_the_same_values_and_remarks(world: World) -> None:
    ql3 = world.ql3
    _set(ql3, "LANG_HINT", "中文提示 hello", "--plain", "--remark", "提示语")
    _set(ql3, "QUOTED", 'say "hi" $HOME `x` \\n', "--plain")
    _set(ql3, "UA", "Mozilla/5.0", "--plain", "--remark", "账号一")
    _set(ql3, "UA", "curl/8.0", "--add", "--remark", "账号二")
    before = {n: ql3.json("local", "vars", "show", n, "--reveal")["values"]
              for n in ("LANG_HINT", "QUOTED", "UA")}
    page = world.page("zh-CN")
    page.goto(world.web.base + "/vars")
    with page.expect_download() as download:
        page.get_by_role("link", name="导出为 NAME=value 行（不含机密）").click()
    exported = Path(download.value.path()).read_text()
    assert 'LANG_HINT="中文提示 hello"' in exported.splitlines()
    # the quoting is the shell's: sh reads every exported line back to the same value
    shell = subprocess.run(["sh", "-c", exported + '\nprintf "%s|%s|%s" "$LANG_HINT" '
                            '"$QUOTED" "$UA"'], capture_output=True, text=True, check=True)
    assert shell.stdout == '中文提示 hello|say "hi" $HOME `x` \\n|curl/8.0'

    def import_lines(text: str) -> str:
        page.goto(world.web.base + "/vars")
        page.get_by_label("每行一个 NAME=value（每行添加一个值）").fill(text)
        page.get_by_role("button", name="导入", exact=True).click()
        page.wait_for_url("**/vars?*")
        return str(page.locator("[role=status]").inner_text())

    assert import_lines(exported) == "已保存 0 个值；4 个已存在，未重复添加；0 个被拒绝。"
    for name in before:
        ql3.run("local", "vars", "rm", name)
    assert import_lines(exported) == "已保存 4 个值；0 个已存在，未重复添加；0 个被拒绝。"
    after = {n: ql3.json("local", "vars", "show", n, "--reveal")["values"] for n in before}
    keep = ("index", "value", "remark", "enabled")
    assert ({n: [{k: v[k] for k in keep} for v in vals] for n, vals in after.items()}
            == {n: [{k: v[k] for k in keep} for v in vals] for n, vals in before.items()})
