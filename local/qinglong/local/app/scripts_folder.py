"""The data directory's scripts folder (``DIR/scripts``, docs/panel.md "Scripts"): list,
read and write its files for the panel's Scripts page, over the socket ops
``scripts_list``, ``scripts_read`` and ``scripts_write``.

Every path is relative to the folder and confined to it: components are checked (no empty,
``.``, ``..``, NUL or leading ``/``) and opened one at a time with ``openat(...,
O_NOFOLLOW)`` from the folder's own descriptor, so a symbolic link anywhere on the way is
refused, never followed. Files are written 0600, new directories 0700, through a temporary
file renamed over the old one (a crash leaves the old file or the new one, never half).
A write carries the version it was based on (the SHA-256 of the content read; ``""`` for a
new file) and is refused with :class:`ScriptChangedError` when the file is no longer that,
so a save over someone else's change loses nothing. Stdlib only.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from typing import Any

from qinglong.shared.digest import sha256_hex
from qinglong.shared.errors import ConflictError, NotFoundError, ValidationError

MAX_SCRIPT_BYTES = 128 * 1024  # JSON-escaped, it still fits the socket's 1 MiB request
MAX_PATH_CHARS = 255
MAX_DEPTH = 8
MAX_LISTED = 1000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ScriptChangedError(ConflictError):
    """The file is not the version the save was based on (changed, made, or removed since
    it was read); nothing was written."""

    code = "script_changed"


def version_of(data: bytes | None) -> str:
    """The version of a file's content: its SHA-256 in hex, ``""`` for no file."""
    # shared/digest.py: CPython's own SHA-256, so serve never maps OpenSSL (ADR-0069's
    # memory gate, integration/test_edge_memory.py)
    return "" if data is None else sha256_hex(data)


def check_path(path: str) -> list[str]:
    """The components of ``path``, a file path relative to the scripts folder.

    Raises:
        ValidationError: empty, absolute, too long (255 characters, 8 levels), or with an
            empty, ``.`` or ``..`` component, a NUL, a backslash or a control character.
    """
    if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS:
        raise ValidationError("path", f"a path of 1 to {MAX_PATH_CHARS} characters")
    if path.startswith("/"):
        raise ValidationError("path", "must be relative to the scripts folder")
    parts = path.split("/")
    if len(parts) > MAX_DEPTH:
        raise ValidationError("path", f"at most {MAX_DEPTH} levels")
    for part in parts:
        if part in ("", ".", ".."):
            raise ValidationError("path", "no empty, '.' or '..' part")
        if "\\" in part or any(ord(ch) < 32 or ord(ch) == 127 for ch in part):
            raise ValidationError("path", "no backslash or control character")
    return parts


class ScriptsFolder:
    """The folder at ``root`` (an absolute path; made 0700 on first use when missing).
    Thread-safe: writes are serialised, so a version check and its rename are one step."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._lock = threading.Lock()

    def _open_root(self) -> int:
        old = os.umask(0o077)
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
        finally:
            os.umask(old)
        try:
            return os.open(self.root, _DIR_FLAGS)
        except OSError as exc:
            raise ValidationError("path", "the scripts folder is not a directory") from exc

    def _open_parent(self, parts: list[str], *, create: bool) -> int:
        """A descriptor of the directory holding the last of ``parts`` (walked with
        O_NOFOLLOW; missing ones made 0700 when ``create``). NotFoundError, ValidationError."""
        fd = self._open_root()
        try:
            for part in parts[:-1]:
                try:
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise NotFoundError("no such script") from None
                    os.mkdir(part, 0o700, dir_fd=fd)
                    nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError:  # ELOOP (a link) or ENOTDIR
                    raise ValidationError("path", "not a folder of the scripts folder "
                                                  "(links are not followed)") from None
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def _read_at(dir_fd: int, name: str) -> bytes | None:
        """The file's bytes, None when it does not exist. ValidationError for a link, a
        non-regular file or one over the size limit."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError:
            raise ValidationError("path", "not a regular file (links are not followed)") \
                from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ValidationError("path", "not a regular file")
            if info.st_size > MAX_SCRIPT_BYTES:
                raise ValidationError("content", f"larger than {MAX_SCRIPT_BYTES} bytes")
            data = os.read(fd, MAX_SCRIPT_BYTES + 1)
            if len(data) > MAX_SCRIPT_BYTES:
                raise ValidationError("content", f"larger than {MAX_SCRIPT_BYTES} bytes")
            return data
        finally:
            os.close(fd)

    def list(self) -> dict[str, Any]:
        """``{"root": absolute path, "files": [{"path", "size", "modified_ms"}], "truncated"}``
        sorted by path; links and special files are skipped, at most 1000 files listed."""
        files: list[dict[str, Any]] = []
        truncated = False
        root_fd = self._open_root()
        try:
            for top, dirs, names, top_fd in os.fwalk(".", dir_fd=root_fd):
                depth = 0 if top == "." else top.count("/")
                if depth >= MAX_DEPTH - 1:
                    dirs[:] = []
                for name in names:
                    info = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
                    if not stat.S_ISREG(info.st_mode):
                        continue
                    if len(files) >= MAX_LISTED:
                        truncated = True
                        break
                    rel = name if top == "." else f"{top[2:]}/{name}"
                    files.append({"path": rel, "size": info.st_size,
                                  "modified_ms": info.st_mtime_ns // 1_000_000})
        finally:
            os.close(root_fd)
        files.sort(key=lambda item: item["path"])
        return {"root": self.root, "files": files, "truncated": truncated}

    def read(self, path: str) -> dict[str, Any]:
        """``{"path", "content": str or None (None: not UTF-8 text), "size", "version"}``.
        NotFoundError for a missing file; ValidationError for a bad path or a large file."""
        parts = check_path(path)
        fd = self._open_parent(parts, create=False)
        try:
            data = self._read_at(fd, parts[-1])
        finally:
            os.close(fd)
        if data is None:
            raise NotFoundError("no such script")
        try:
            content: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            content = None
        return {"path": path, "content": content, "size": len(data),
                "version": version_of(data)}

    def write(self, path: str, content: str, version: str) -> dict[str, Any]:
        """Store ``content`` (UTF-8) at ``path`` if the file is still ``version`` (``""``:
        it must not exist yet); ``{"path", "size", "version": the new one, "created"}``.

        Raises:
            ScriptChangedError: the file is not ``version`` any more; nothing written.
            ValidationError: a bad path, content over 128 KiB or with a NUL, a link.
        """
        parts = check_path(path)
        data = content.encode("utf-8", "surrogatepass")
        if len(data) > MAX_SCRIPT_BYTES:
            raise ValidationError("content", f"larger than {MAX_SCRIPT_BYTES} bytes")
        if "\0" in content:
            raise ValidationError("content", "must not contain NUL")
        with self._lock:
            fd = self._open_parent(parts, create=version == "")
            try:
                current = self._read_at(fd, parts[-1])
                if version_of(current) != version:
                    raise ScriptChangedError(
                        "the file changed since it was opened; nothing was saved")
                self._replace(fd, parts[-1], data)
            finally:
                os.close(fd)
        return {"path": path, "size": len(data), "version": version_of(data),
                "created": current is None}

    @staticmethod
    def _replace(dir_fd: int, name: str, data: bytes) -> None:
        tmp = f".{name[:200]}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
