"""The worker's private spool directory and the attempt checkouts below it, shared by the
output spool (``spool.py``) and script bundles (``bundles.py``); docs/protocols.md §4.2
"Logs", §4.7.

Both modules import this one and never each other.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from qinglong.shared.process.path_lock import PathLock
from qinglong.worker.bundle_extract import remove_tree
from qinglong.worker.errors import SpoolError


def prepare_spool_dir(path: Path) -> Path:
    """Create (0700) or verify the private spool directory and return its absolute path.

    Raises SpoolError when it is a symlink, not a directory, owned by another uid, or grants
    any permission to group or other.
    """
    path = path.absolute()
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(path)
    except OSError as exc:
        raise SpoolError(f"spool directory cannot be created ({exc.strerror})") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SpoolError("spool directory is a symlink or not a directory")
    if info.st_uid != os.getuid():
        raise SpoolError("spool directory belongs to another user")
    if info.st_mode & 0o077:
        raise SpoolError("spool directory must be private (0700)")
    return path


def remove_stale_checkouts(spool_dir: Path, work_dir: Path | None = None) -> int:
    """Remove ``<work_dir>/<attempt id>`` directories (default ``<spool>/work``) whose
    attempt lock (``<spool>/<attempt id>.lock``) no process holds: what a killed worker
    left. Call it only while no live worker uses ``spool_dir``; the number removed."""
    work = spool_dir / "work" if work_dir is None else work_dir
    removed = 0
    try:
        names = os.listdir(work)
    except OSError:
        return 0
    for name in names:
        path = work / name
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                continue
            if PathLock(str(spool_dir / f"{name}.lock")).held():
                continue
        except OSError:
            continue
        remove_tree(path)
        removed += 1
    return removed
