"""The worker's only credential, its token (docs/protocols.md §4.2, §4.5; issue 11 item 6).

Read once from ``QL3_WORKER_TOKEN`` or a 0600 file, then removed from ``os.environ`` (so no
child can inherit it), and the process is made non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``):
/proc/<pid>/environ and /proc/<pid>/mem then belong to root, so a task running under the same
uid cannot read the token from the worker's initial environment block, which ``unsetenv`` does
not erase.

A token from a file may change while the worker runs (an operator's own 0600 file, replaced
atomically at a rotation): ``read_token_file`` reads it again, with the same checks, when
control refuses the token (``client.ControlClient``'s ``reload_token``). A token from the
environment cannot change. The file must be readable by its owner only (no group or other
bit), so no other user gets the token; but tasks run as the worker's user and can read a
file it can, so only ``QL3_WORKER_TOKEN`` keeps the token from them — what the chart's pods
use (docs/operations.md §3).
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import MutableMapping

from qinglong.worker.errors import TokenError

TOKEN_ENV = "QL3_WORKER_TOKEN"  # noqa: S105  (a variable name, not a secret)
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
MAX_TOKEN_BYTES = 4096


def load_token(token_file: str | None,
               environ: MutableMapping[str, str] | None = None) -> str:
    """The token from ``token_file`` (a regular file, no group/other permission, ≤ 4 KiB,
    surrounding whitespace stripped) or else from ``QL3_WORKER_TOKEN``; the variable is removed
    from ``environ`` (default os.environ) in both cases.

    Raises TokenError (field ``--token-file`` or ``QL3_WORKER_TOKEN``) when missing, empty,
    unsafe or unreadable; the message never holds the token.
    """
    env = os.environ if environ is None else environ
    from_env = env.pop(TOKEN_ENV, None)
    if token_file is not None:
        return read_token_file(token_file)
    if not from_env or not from_env.strip():
        raise TokenError(TOKEN_ENV, "no worker token: set QL3_WORKER_TOKEN or --token-file")
    return from_env.strip()


def read_token_file(path: str) -> str:
    """The token in ``path``: opened with O_NOFOLLOW, a regular file with no group/other
    permission, ≤ 4 KiB, surrounding whitespace stripped. TokenError (field
    ``--token-file``) otherwise; the message never holds the token."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise TokenError("--token-file", f"cannot open ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TokenError("--token-file", "must be a regular file")
        if info.st_mode & 0o077:
            raise TokenError("--token-file",
                             f"must not be readable by group or others (mode "
                             f"{stat.S_IMODE(info.st_mode):04o}; use chmod 600)")
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_BYTES:
        raise TokenError("--token-file", "too large for a token")
    token = data.decode("utf-8", "replace").strip()
    if not token:
        raise TokenError("--token-file", "is empty")
    return token


def _prctl(option: int, arg: int = 0) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    result = int(libc.prctl(option, arg, 0, 0, 0))
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return result


def make_undumpable() -> None:
    """``prctl(PR_SET_DUMPABLE, 0)`` for this process. OSError if the kernel refuses."""
    _prctl(PR_SET_DUMPABLE, 0)


def is_dumpable() -> bool:
    """``prctl(PR_GET_DUMPABLE)`` of this process, as a bool."""
    return _prctl(PR_GET_DUMPABLE) != 0
