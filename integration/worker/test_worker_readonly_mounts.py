"""The wrapper's namespace leaves an attempt a read-only file system (docs/protocols.md
§4.8): its own directory and a private /tmp stay writable, everything else refuses writes,
with mount_setattr(2) and with the mountinfo fallback older kernels get (forced here by a
system call number the kernel does not know). Real namespaces and mounts, in a forked
child of the test."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from qinglong.worker import group_wrapper, isolation

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not isolation.userns_works(),
                                 reason="user namespaces are not allowed here")]


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory outside /tmp, /var/tmp and /dev/shm (those are private in the
    namespace), holding the attempt's directory ``keep`` and a file of someone else."""
    path = Path(tempfile.mkdtemp(prefix="ql3-ro-", dir="/run"))
    (path / "keep").mkdir()
    (path / "other.txt").write_text("the worker's\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _try_write(path: str) -> str:
    try:
        with open(path, "a") as fh:
            fh.write("x\n")
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, "?")
    return "ok"


@pytest.mark.parametrize("how", ["mount_setattr", "mountinfo"])
def test_only_the_attempts_directory_and_its_tmp_are_writable(place: Path, how: str) -> None:
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover  (the child reports through the pipe)
        code = 1
        try:
            os.close(read)
            if how == "mountinfo":
                group_wrapper.SYS_MOUNT_SETATTR = 0xFFFF  # ENOSYS, as before Linux 5.12
            group_wrapper.enter_namespaces(str(place / "keep"), [], [])
            results = [_try_write(str(place / "other.txt")), _try_write(str(place / "new")),
                       _try_write(str(place / "keep" / "mine")), _try_write("/tmp/scratch"),
                       _try_write("/dev/shm/scratch"), _try_write("/dev/null")]
            os.write(write, " ".join(results).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        answer = fh.read().decode()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, answer
    assert answer.split() == ["EROFS", "EROFS", "ok", "ok", "ok", "ok"]
    assert (place / "other.txt").read_text() == "the worker's\n"
    assert (place / "keep" / "mine").read_text() == "x\n"
    assert not (place / "new").exists()
