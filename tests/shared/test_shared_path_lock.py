"""The attempt lock addressed by path (docs/protocols.md §3.3; case C18): created locked, held by
whichever processes inherited it, free when the last one exits; real processes."""

from __future__ import annotations

import os
import subprocess

import pytest

from qinglong.shared.process.path_lock import PathLock, create_locked


def test_lock_handed_to_a_child_is_held_until_the_child_exits(tmp_path):
    path = tmp_path / "a.lock"
    fd = create_locked(str(path))
    child = subprocess.Popen(["sleep", "30"], pass_fds=(fd,), start_new_session=True)
    os.close(fd)  # only the child's copy of the open file description remains
    lock = PathLock(str(path))
    try:
        assert lock.held()
        assert lock.holders() == [child.pid]
        assert lock.discard() is False and path.exists()  # never removed while held
    finally:
        child.kill()
        child.wait()
    assert not lock.held()
    assert lock.holders() == []
    assert lock.discard() is True and not path.exists()


def test_create_refuses_an_existing_file_or_symlink_and_probe_refuses_a_symlink(tmp_path):
    target = tmp_path / "target"
    target.write_text("")
    link = tmp_path / "link.lock"
    link.symlink_to(target)
    with pytest.raises(FileExistsError):
        create_locked(str(target))
    with pytest.raises(FileExistsError):
        create_locked(str(link))
    with pytest.raises(OSError):
        PathLock(str(link)).held()
    assert PathLock(str(tmp_path / "missing.lock")).held() is False
