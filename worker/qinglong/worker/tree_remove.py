"""Removing what an attempt left without ever following a link (docs/protocols.md §4.8).

Every step goes through directory file descriptors: a child is opened relative to its
parent's fd with ``O_NOFOLLOW``, so a directory swapped for a symlink while the walk runs is
unlinked as a symlink, never entered; a mode is changed only through the fd of what was
opened (``/proc/self/fd/N`` of an ``O_PATH`` fd), never through a path.

Also a script, run by the worker as ``python3 -I -S tree_remove.py <uid> [--empty DIR]
[--sweep DIR]...`` (root, or a worker that may change its uid): it drops to ``<uid>`` (gid
the same, no supplementary groups) before it touches anything, then empties ``DIR`` (an
attempt's private directory; the worker removes the empty directory itself) and removes,
from each ``--sweep`` directory (``/tmp``, ``/var/tmp``, ``/dev/shm``), every entry that
``<uid>`` owns. As that uid it can reach nothing the attempt could not. Imports only os,
stat and sys at first (ctypes before the drop), so it stays runnable when the new uid cannot
read the interpreter's files. Exit 0 when everything asked for is gone, 1 otherwise.
"""

from __future__ import annotations

import os
import stat
import sys

_PATH_FLAGS = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
_REOPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_PARENT_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC  # search permission is enough
ROUNDS = 5  # listings of one directory before giving up (a live writer keeps adding)
PR_SET_DUMPABLE = 4


def _open_dir(parent: int, name: str) -> int | None:
    """A readable fd of the directory ``name`` below the fd ``parent`` (its owner bits opened
    up to rwx when the task took them away), or None when ``name`` is not a directory now
    (a symlink included) or cannot be opened."""
    try:
        handle = os.open(name, _PATH_FLAGS, dir_fd=parent)
    except OSError:
        return None
    try:
        info = os.fstat(handle)
        if not stat.S_ISDIR(info.st_mode):
            return None
        via = f"/proc/self/fd/{handle}"  # this very inode, whatever the name is now
        if info.st_mode & 0o700 != 0o700:
            os.chmod(via, 0o700)
        return os.open(via, _REOPEN_FLAGS)
    except OSError:
        return None
    finally:
        os.close(handle)


def empty_dir(fd: int) -> bool:
    """Remove everything below the directory ``fd``; True when it lists empty at the end."""
    for _ in range(ROUNDS):
        try:
            names = os.listdir(fd)
        except OSError:
            return False
        if not names:
            return True
        for name in names:
            remove_entry(fd, name)
    try:
        return not os.listdir(fd)
    except OSError:
        return False


def remove_entry(parent: int, name: str) -> None:
    """Remove ``name`` below the directory fd ``parent``: a non-directory (symlinks
    included) is unlinked, a directory emptied through its own fd, then removed. Errors are
    ignored (the caller lists again)."""
    try:
        os.unlink(name, dir_fd=parent)
        return
    except IsADirectoryError:
        pass
    except OSError:
        return
    child = _open_dir(parent, name)
    if child is None:
        return
    try:
        empty_dir(child)
    except RecursionError:  # a tree deeper than the interpreter's stack: left for later
        return
    finally:
        os.close(child)
    try:  # noqa: SIM105  (no contextlib: the script imports as little as it can)
        os.rmdir(name, dir_fd=parent)
    except OSError:
        pass


def remove_tree(path: str | os.PathLike[str]) -> bool:
    """Remove ``path`` and everything below it, never following a link below its parent
    (whose path the caller trusts); True when it is gone. Never raises."""
    head, name = os.path.split(os.path.abspath(path))
    try:
        parent = os.open(head or "/", _PARENT_FLAGS)
    except OSError:
        return False
    try:
        remove_entry(parent, name)
        try:
            os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return True
        except OSError:
            pass
        return False
    finally:
        os.close(parent)


def empty_path(path: str) -> bool:
    """Empty the directory ``path`` (not a symlink) in place; True when it lists empty."""
    head, name = os.path.split(os.path.abspath(path))
    try:
        parent = os.open(head or "/", _PARENT_FLAGS)
    except OSError:
        return False
    try:
        fd = _open_dir(parent, name)
    finally:
        os.close(parent)
    if fd is None:
        return False
    try:
        return empty_dir(fd)
    except RecursionError:
        return False
    finally:
        os.close(fd)


def sweep(path: str, uid: int) -> bool:
    """Remove every entry of the directory ``path`` that ``uid`` owns (what an attempt left
    in a shared directory such as /tmp); True when none is left."""
    try:
        fd = os.open(path, _REOPEN_FLAGS | os.O_NOFOLLOW)
    except OSError:
        return True  # no such directory here: nothing can be left in it
    try:
        clean = True
        for name in os.listdir(fd):
            try:
                if os.stat(name, dir_fd=fd, follow_symlinks=False).st_uid != uid:
                    continue
            except OSError:
                continue
            remove_entry(fd, name)
            try:
                os.stat(name, dir_fd=fd, follow_symlinks=False)
                clean = False
            except FileNotFoundError:
                pass
            except OSError:
                clean = False
        return clean
    except OSError:
        return False
    finally:
        os.close(fd)


def drop_to(uid: int) -> None:
    """Become ``uid`` (gid the same number, no supplementary groups) for good, and stay
    dumpable so this process may still use its own ``/proc/self/fd``."""
    import ctypes  # before the drop: the new uid may not read the interpreter's files

    libc = ctypes.CDLL(None, use_errno=True)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "dumpable")


def main(args: list[str]) -> int:
    """The script's contract (see the module docstring); ``args`` is ``sys.argv[1:]``."""
    try:
        uid = int(args[0])
        pairs = list(zip(args[1::2], args[2::2], strict=True))
    except (IndexError, ValueError):
        sys.stderr.write("ql3 tree_remove: bad invocation\n")
        return 2
    if uid <= 0 or any(flag not in ("--empty", "--sweep") for flag, _ in pairs):
        sys.stderr.write("ql3 tree_remove: bad invocation\n")
        return 2
    drop_to(uid)
    ok = True
    for flag, path in pairs:
        ok = (empty_path(path) if flag == "--empty" else sweep(path, uid)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
