"""Symlink-refusing directory walks (docs/protocols.md §3.2 step 3, ADR-0069 §2 step 3).

``O_NOFOLLOW`` alone checks only the last component of a path, so every directory below a
configured root is opened one component at a time with ``openat(dir_fd, name, O_NOFOLLOW |
O_DIRECTORY)``: a symlink anywhere on the path is refused, never followed. The configured
root itself must not be a symlink either; its parents are trusted configuration.
"""

from __future__ import annotations

import errno
import os
import stat

from qinglong.shared.errors import QinglongError, ValidationError

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
PRIVATE_DIR_MODE = 0o700
_REFUSED = (errno.ELOOP, errno.ENOTDIR, errno.EMLINK)


class UnsafePathError(QinglongError):
    """A path component is a symlink, not a directory, or not private to this user."""

    code = "unsafe_path"


def check_absolute(path: object, field: str) -> str:
    """Return ``path`` if it is an absolute, normalised ``str`` path without NUL.

    Raises:
        ValidationError: anything else (the message never repeats the value).
    """
    if not isinstance(path, str) or not path or "\0" in path:
        raise ValidationError(field, "must be a non-empty path string without NUL")
    if not os.path.isabs(path) or os.path.normpath(path) != path or path.startswith("//"):
        raise ValidationError(field, "must be an absolute, normalised path")
    return path


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafePathError("path component is not a plain name")


def _open_dir(dir_fd: int, name: str) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _REFUSED:
            raise UnsafePathError("path component is a symlink or not a directory") from None
        raise


def open_child_dir(dir_fd: int, name: str, *, create: bool, private: bool = False) -> int:
    """Open directory ``name`` under ``dir_fd`` without following symlinks; return its fd.

    With ``create``, a missing directory is made with mode 0700 and the parent is fsynced.
    With ``private``, the directory must be owned by this user with no group/other bits.

    Raises:
        UnsafePathError: a symlink, a non-directory, or (``private``) not private.
        FileNotFoundError: missing and ``create`` is false. OSError: other I/O failures.
    """
    _check_name(name)
    created = False
    try:
        fd = _open_dir(dir_fd, name)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, PRIVATE_DIR_MODE, dir_fd=dir_fd)
            created = True
        except FileExistsError:
            pass  # a concurrent creator won; the open below checks what is there
        fd = _open_dir(dir_fd, name)
    try:
        if created:
            os.fchmod(fd, PRIVATE_DIR_MODE)  # exact mode whatever the umask
            os.fsync(dir_fd)
        if private:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
                raise UnsafePathError("directory is not private to this user")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_root(path: str, *, create: bool, private: bool = False) -> int:
    """Open a configured absolute root directory (not itself a symlink); return its fd.

    Creates it 0700 when missing and ``create`` (its parent must exist). Errors as
    :func:`open_child_dir`.
    """
    check_absolute(path, "root")
    parent, name = os.path.split(path)
    if not name:
        return os.open(path, DIR_FLAGS)
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_child_dir(parent_fd, name, create=create, private=private)
    finally:
        os.close(parent_fd)


def open_dir_chain(root_fd: int, names: list[str], *, create: bool) -> int:
    """Walk ``names`` below ``root_fd`` one component at a time; return the last fd.

    The caller keeps ``root_fd``; the returned fd is new (``dup`` of the root when ``names``
    is empty). Errors as :func:`open_child_dir`.
    """
    fd = os.dup(root_fd)
    for name in names:
        try:
            child = open_child_dir(fd, name, create=create)
        finally:
            os.close(fd)
        fd = child
    return fd


def open_output_dir(log_root: str, output_path: str) -> int:
    """Open the directory holding ``output_path`` (inside ``log_root``), creating missing
    directories 0700, every component without following symlinks; returns a close-on-exec
    fd. Raises as :func:`open_output_file`."""
    relative = os.path.relpath(output_path, log_root)
    parts = relative.split("/")
    if relative.startswith("..") or relative == "." or any(p in ("", ".", "..") for p in parts):
        raise ValidationError("output_path", "must be inside the log root")
    root_fd = open_root(log_root, create=True)
    try:
        return open_dir_chain(root_fd, parts[:-1], create=True)
    finally:
        os.close(root_fd)


def open_output_file(log_root: str, output_path: str) -> int:
    """Open ``output_path`` (inside ``log_root``) for appending, creating it 0600.

    Missing directories are created 0700; every component is opened without following
    symlinks, the file with ``O_NOFOLLOW | O_APPEND | O_CREAT`` (and ``O_NONBLOCK`` so a
    FIFO cannot block the open). The result is a blocking, close-on-exec fd of a regular
    file owned by this user with a single link.

    Raises:
        UnsafePathError: a symlink, FIFO, device, foreign or hard-linked file on the path.
        ValidationError: ``output_path`` is not strictly inside ``log_root``.
        OSError: I/O failures.
    """
    dir_fd = open_output_dir(log_root, output_path)
    name = output_path.rpartition("/")[2]
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        _check_name(name)
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (*_REFUSED, errno.ENXIO, errno.EISDIR):
            raise UnsafePathError("output file is a symlink or not a regular file") from None
        raise
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != os.geteuid():
            raise UnsafePathError("output file is not a private regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
