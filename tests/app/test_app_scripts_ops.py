"""The scripts folder's socket ops (docs/panel.md "Scripts", docs/protocols.md §3.8):
``scripts_list``, ``scripts_read``, ``scripts_write`` with its version check, paths
confined to ``DIR/scripts`` and links never followed."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from qinglong.local.app import ops
from qinglong.local.app.scripts_folder import MAX_SCRIPT_BYTES, ScriptChangedError, ScriptsFolder
from qinglong.local.app.service import LocalService
from qinglong.shared.errors import NotFoundError, ValidationError


def _service(root: Path | None) -> LocalService:
    repo: Any = SimpleNamespace(db=None, clock=None)  # the scripts ops never touch it
    folder = None if root is None else ScriptsFolder(str(root))
    return LocalService(repo, supervised=True, scripts=folder)


def test_write_list_and_read_a_chinese_script_in_a_new_folder(tmp_path: Path) -> None:
    root = tmp_path / "scripts"
    service = _service(root)
    assert ops.call(service, "scripts_list", {})["files"] == []
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o700  # made on first use
    text = "# 签到\nprint('你好')\n"
    saved = ops.call(service, "scripts_write", {"path": "jd/签到.py", "content": text,
                                                "version": ""})
    assert saved["created"] is True
    assert saved["version"] == hashlib.sha256(text.encode()).hexdigest()
    assert stat.S_IMODE(os.stat(root / "jd" / "签到.py").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(root / "jd").st_mode) == 0o700
    listed = ops.call(service, "scripts_list", {})["files"]
    assert [f["path"] for f in listed] == ["jd/签到.py"]
    assert listed[0]["size"] == len(text.encode())
    read = ops.call(service, "scripts_read", {"path": "jd/签到.py"})
    assert read["content"] == text and read["version"] == saved["version"]


def test_a_save_over_a_changed_file_is_refused_and_keeps_the_other_change(
        tmp_path: Path) -> None:
    service = _service(tmp_path)
    first = ops.call(service, "scripts_write", {"path": "a.py", "content": "v1",
                                                "version": ""})
    (tmp_path / "a.py").write_text("someone else")
    with pytest.raises(ScriptChangedError) as caught:
        ops.call(service, "scripts_write", {"path": "a.py", "content": "mine",
                                            "version": first["version"]})
    assert caught.value.code == "script_changed"
    assert (tmp_path / "a.py").read_text() == "someone else"
    with pytest.raises(ScriptChangedError):  # "new" over an existing file
        ops.call(service, "scripts_write", {"path": "a.py", "content": "x", "version": ""})
    current = ops.call(service, "scripts_read", {"path": "a.py"})["version"]
    ops.call(service, "scripts_write", {"path": "a.py", "content": "mine", "version": current})
    assert (tmp_path / "a.py").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["a.py"]  # no temporary file left


@pytest.mark.parametrize("path", ["../x.py", "a/../../x.py", "/etc/passwd", "", "a//b",
                                  "./a", "a\\..\\b", "a\0b", "x" * 256])
def test_paths_outside_the_folder_are_refused(tmp_path: Path, path: str) -> None:
    service = _service(tmp_path / "scripts")
    for op, args in (("scripts_read", {"path": path}),
                     ("scripts_write", {"path": path, "content": "x", "version": ""})):
        with pytest.raises(ValidationError):
            ops.call(service, op, args)
    assert not (tmp_path / "x.py").exists()


def test_links_are_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "scripts"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("private")
    service = _service(root)
    ops.call(service, "scripts_list", {})
    (root / "out").symlink_to(outside)
    (root / "link.txt").symlink_to(outside / "secret.txt")
    assert ops.call(service, "scripts_list", {})["files"] == []
    for path in ("out/secret.txt", "link.txt"):
        with pytest.raises(ValidationError):
            ops.call(service, "scripts_read", {"path": path})
        with pytest.raises(ValidationError):
            ops.call(service, "scripts_write", {"path": path, "content": "x",
                                                "version": ""})
    with pytest.raises(ValidationError):
        ops.call(service, "scripts_write", {"path": "out/new.py", "content": "x",
                                            "version": ""})
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "private"


def test_size_limit_bad_arguments_and_missing_files(tmp_path: Path) -> None:
    service = _service(tmp_path)
    with pytest.raises(ValidationError):
        ops.call(service, "scripts_write", {"path": "big.py", "version": "",
                                            "content": "x" * (MAX_SCRIPT_BYTES + 1)})
    (tmp_path / "big.py").write_bytes(b"x" * (MAX_SCRIPT_BYTES + 1))
    with pytest.raises(ValidationError):
        ops.call(service, "scripts_read", {"path": "big.py"})
    with pytest.raises(NotFoundError):
        ops.call(service, "scripts_read", {"path": "none.py"})
    with pytest.raises(ValidationError):
        ops.call(service, "scripts_write", {"path": "a.py", "content": 5, "version": ""})
    (tmp_path / "bin").write_bytes(b"\xff\xfe")
    assert ops.call(service, "scripts_read", {"path": "bin"})["content"] is None
    with pytest.raises(ValidationError):
        ops.call(_service(None), "scripts_list", {})
