"""Script bundles: the one member checker and deterministic packing (docs/protocols.md §4.7).

A bundle is a gzip-compressed tar archive, named by the SHA-256 of its compressed bytes. The
client packs it (``pack``), control checks it when it is pushed, and a worker checks it
again while it extracts it — all three with ``scan`` below, our own code: the decision never
depends on the Python patch level's ``tarfile`` extraction filters (``tarfile`` only parses;
nothing here calls ``extract``/``extractall``).

Rules a member must pass (``BundleError.reason`` in brackets):

- a regular file or a directory; no symlink, hard link, device, FIFO, sparse or
  contiguous file [``link``, ``special_file``];
- a relative path: no leading ``/`` [``absolute_path``], no ``..`` component
  [``parent_reference``]; ``./`` prefixes are removed (``./`` alone is the root and is
  skipped); no empty or ``.`` component inside, no control characters, valid UTF-8, at most
  1024 characters and 255 per component [``bad_name``];
- each path once, and never a file where a directory is (``a`` then ``a/b``) [``duplicate``,
  ``path_conflict``];
- at most ``members`` entries, files of at most ``unpacked_bytes`` in total, at most
  ``compressed_bytes`` compressed (``BundleTooLargeError``, reasons ``too_many_members``,
  ``too_large_unpacked``, ``too_large_compressed``); decompression itself is bounded too;
- a name ending in ``/`` only for a directory that carries no data [``corrupt``] (GNU tar
  lists a file named ``x/`` as an empty directory, hiding its content from a reviewer);
- at least one regular file [``empty``]; the archive parses [``not_gzip``, ``corrupt``],
  ends with its two end-of-archive blocks and holds only zeros after them [``corrupt``];
- every header passes our own pass first (``qinglong.shared.bundle_headers``): an extended
  header (PAX, GNU long name) of more than 64 KiB is refused before ``tarfile`` reads it
  [``header_too_large``, a ``BundleTooLargeError``].

Modes are reduced to ``0o755`` (a file whose owner-execute bit is set) or ``0o644``, and
``0o755`` for directories: setuid, setgid, sticky and write bits for others never survive.
Owners, groups and times are ignored. Messages name the member by its 1-based position,
never by its name or content.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from qinglong.shared.bundle_errors import BundleError, BundleTooLargeError
from qinglong.shared.bundle_headers import HeaderGuard
from qinglong.shared.errors import QinglongError

MIB = 1024 * 1024
MAX_COMPRESSED_BYTES = 32 * MIB
MAX_MEMBERS = 10_000
MAX_UNPACKED_BYTES = 256 * MIB
MAX_PATH_CHARS = 1024
MAX_COMPONENT_CHARS = 255
CHUNK_BYTES = 65536
__all__ = [  # the errors live in bundle_errors (shared with bundle_headers), named here too
    "CHUNK_BYTES", "DEFAULT_LIMITS", "DIR_MODE", "EXEC_MODE", "FILE_MODE", "MAX_COMPONENT_CHARS",
    "MAX_COMPRESSED_BYTES", "MAX_MEMBERS", "MAX_PATH_CHARS", "MAX_UNPACKED_BYTES", "MIB",
    "BundleError", "BundleLimits", "BundleTooLargeError", "Manifest", "Member", "OnDir",
    "OnFile", "PackError", "check_member", "normalize_entry_point", "normalize_name", "pack",
    "sanitized_mode", "scan"]
FILE_MODE, EXEC_MODE, DIR_MODE = 0o644, 0o755, 0o755
_FILE_TYPES = (tarfile.REGTYPE, tarfile.AREGTYPE)
_LINK_TYPES = (tarfile.SYMTYPE, tarfile.LNKTYPE)


@dataclass(frozen=True)
class BundleLimits:
    """Bounds of one bundle: compressed size (bytes), entries (files and directories) and
    the total size of its files (bytes)."""

    compressed_bytes: int = MAX_COMPRESSED_BYTES
    members: int = MAX_MEMBERS
    unpacked_bytes: int = MAX_UNPACKED_BYTES

    def decompressed_cap(self) -> int:
        """Most tar bytes worth reading: the files, a header and padding block per entry
        (PAX headers included), and the end blocks. Beyond it the archive is refused."""
        return self.unpacked_bytes + self.members * 4 * 512 + 64 * 1024


DEFAULT_LIMITS = BundleLimits()


class PackError(QinglongError):
    """A local tree cannot be packed: a symlink, a special file, an unreadable entry or a
    bound passed. ``path`` is the offending entry relative to the packed root (the user's
    own file, shown to that user only)."""

    code = "bundle_pack_refused"

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


@dataclass(frozen=True)
class Member:
    """One checked entry: normalized relative ``path``, ``kind`` "file" or "dir",
    ``size_bytes`` (0 for a directory) and the sanitized ``mode``."""

    path: str
    kind: str
    size_bytes: int
    mode: int

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "kind": self.kind, "size_bytes": self.size_bytes,
                "mode": self.mode}


@dataclass(frozen=True)
class Manifest:
    """What a checked bundle holds: its members in archive order and the file bytes."""

    members: tuple[Member, ...]
    unpacked_bytes: int

    @property
    def member_count(self) -> int:
        return len(self.members)

    def is_file(self, path: str) -> bool:
        """True when ``path`` (already normalized) is a regular-file member."""
        return any(m.path == path and m.kind == "file" for m in self.members)


def normalize_name(name: str, where: str) -> str | None:
    """The member path ``name`` without ``./`` prefixes and a trailing ``/``; None for the
    root itself (``.``, ``./``). BundleError (``where`` names the member) for an absolute
    path, a ``..`` component or a malformed name."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        raise BundleError("bad_name", f"{where} has a control character in its name")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise BundleError("bad_name", f"{where} has a name that is not UTF-8") from None
    while name.startswith("./"):
        name = name[2:]
    if name.startswith("/"):
        raise BundleError("absolute_path", f"{where} has an absolute path")
    name = name.rstrip("/")
    if name in ("", "."):
        return None
    parts = name.split("/")
    if ".." in parts:
        raise BundleError("parent_reference", f"{where} has a '..' component")
    if any(p in ("", ".") for p in parts):
        raise BundleError("bad_name", f"{where} has an empty or '.' path component")
    if len(name) > MAX_PATH_CHARS or any(len(p) > MAX_COMPONENT_CHARS for p in parts):
        raise BundleError("bad_name", f"{where} has a name that is too long")
    return name


def normalize_entry_point(text: str) -> str:
    """An entry point as stored: a relative path inside the bundle, normalized like a member
    name. BundleError (field ``entry_point``) for anything else."""
    try:
        path = normalize_name(text, "the entry point")
    except BundleError as exc:
        raise BundleError(exc.reason, str(exc).partition(": ")[2]) from None
    if path is None:
        raise BundleError("bad_name", "the entry point must name a file")
    return path


def sanitized_mode(kind: str, mode: int) -> int:
    """0o755 for a directory or an owner-executable file, else 0o644."""
    return DIR_MODE if kind == "dir" or mode & stat.S_IXUSR else FILE_MODE


class _Bounded(io.RawIOBase):
    """A read-only stream over ``read`` that raises ``error`` once more than ``cap`` bytes
    came through."""

    def __init__(self, read: Callable[[int], bytes], cap: int,
                 error: BundleTooLargeError) -> None:
        self._read, self._cap, self._error, self._seen = read, cap, error, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._read(len(buffer))
        self._seen += len(data)
        if self._seen > self._cap:
            raise self._error
        buffer[: len(data)] = data
        return len(data)


def _prefixed(head: bytes, read: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """A ``read`` that returns ``head`` first, then what ``read`` gives."""
    pending = [head]

    def prefixed_read(n: int) -> bytes:
        if pending and pending[0]:
            data, pending[0] = pending[0][:n], pending[0][n:]
            return data
        return read(n)

    return prefixed_read


OnFile = Callable[[Member, IO[bytes]], None]
OnDir = Callable[[Member], None]


class _Tree:
    """Paths seen so far: each once, never a file where a directory is."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.dirs: set[str] = set()
        self.declared: set[str] = set()

    def add(self, path: str, kind: str, where: str) -> None:
        if path in self.files or path in self.declared:
            raise BundleError("duplicate", f"{where} repeats an earlier path")
        parents = path.split("/")[:-1]
        for i in range(1, len(parents) + 1):
            if "/".join(parents[:i]) in self.files:
                raise BundleError("path_conflict", f"{where} lies below a file")
            self.dirs.add("/".join(parents[:i]))
        if kind == "file":
            if path in self.dirs:
                raise BundleError("path_conflict", f"{where} is a file where a directory is")
            self.files.add(path)
        else:
            self.dirs.add(path)
            self.declared.add(path)


def check_member(info: tarfile.TarInfo, index: int) -> Member | None:
    """The Member for one parsed header, or None for the root entry. BundleError for a
    link, a special file or a bad name."""
    where = f"member {index}"
    if info.type in _LINK_TYPES:
        raise BundleError("link", f"{where} is a link")
    if info.type not in (*_FILE_TYPES, tarfile.DIRTYPE) or info.issparse():
        raise BundleError("special_file", f"{where} is not a regular file or directory")
    named = info.pax_headers.get("path", info.name)  # tarfile strips a PAX path's "/"
    if (named.endswith("/") or info.name.endswith("/")) and info.type != tarfile.DIRTYPE:
        # GNU tar lists a file named "x/" as an empty directory: a reviewer would not see
        # the code it carries
        raise BundleError("corrupt", f"{where} has a name ending in '/' and is not a "
                                     "directory")
    if info.type == tarfile.DIRTYPE and info.size:
        # tarfile skips no data after a directory header (a file named "x/" is read as one):
        # the next header would be read from inside that data, and tarfile ends the archive
        # silently at a header it cannot parse, hiding every member after it
        raise BundleError("corrupt", f"{where} is a directory that carries data")
    path = normalize_name(info.name, where)
    if path is None:
        if info.type != tarfile.DIRTYPE:
            raise BundleError("bad_name", f"{where} is a file without a name")
        return None
    kind = "dir" if info.type == tarfile.DIRTYPE else "file"
    return Member(path, kind, info.size if kind == "file" else 0,
                  sanitized_mode(kind, info.mode))


def scan(source: IO[bytes], limits: BundleLimits = DEFAULT_LIMITS, *,
         on_file: OnFile | None = None, on_dir: OnDir | None = None) -> Manifest:
    """Check every member of the gzip tar ``source`` (read from its current position, at
    most ``limits.compressed_bytes`` plus one byte of it) and return the Manifest.

    ``on_dir(member)`` and ``on_file(member, stream)`` run for each directory and file in
    archive order, after that member passed; ``on_file`` must read the stream (exactly
    ``size_bytes``) before returning. Raises BundleError / BundleTooLargeError at the first
    member that fails (an extractor must then discard what it wrote), and lets the
    callbacks' own exceptions through.
    """
    head = source.read(2)
    if head != b"\x1f\x8b":
        raise BundleError("not_gzip", "the bundle is not gzip-compressed")
    compressed = io.BufferedReader(_Bounded(
        _prefixed(head, source.read), limits.compressed_bytes,
        BundleTooLargeError("too_large_compressed", "the compressed bundle passes the bound")))
    tree, total = _Tree(), 0
    members: list[Member] = []
    try:
        with gzip.GzipFile(fileobj=compressed, mode="rb") as gz:
            guard = HeaderGuard(gz.read)
            unpacked = io.BufferedReader(_Bounded(guard.read, limits.decompressed_cap(),
                                                  BundleTooLargeError(
                                                      "too_large_unpacked",
                                                      "the archive unpacks beyond the bound")))
            seen = 0
            with tarfile.open(fileobj=cast(IO[bytes], unpacked), mode="r|") as tar:
                for index, info in enumerate(tar, start=1):
                    seen = index
                    if index > limits.members:
                        raise BundleTooLargeError("too_many_members",
                                                  f"more than {limits.members} members")
                    member = check_member(info, index)
                    if member is None:
                        continue
                    tree.add(member.path, member.kind, f"member {index}")
                    total += member.size_bytes
                    if total > limits.unpacked_bytes:
                        raise BundleTooLargeError("too_large_unpacked",
                                                  "the files pass the unpacked bound")
                    members.append(member)
                    if member.kind == "dir":
                        if on_dir is not None:
                            on_dir(member)
                    elif on_file is not None:
                        stream = tar.extractfile(info)
                        assert stream is not None  # a regular file always has one
                        on_file(member, stream)
            # §4.7: the archive ends with its end-of-archive blocks and only zeros follow;
            # the digest covers no byte the manifest does not account for
            while unpacked.read(CHUNK_BYTES):
                pass
            guard.finish()
            if guard.members != seen:
                raise BundleError("corrupt", "the archive's headers do not parse alike")
    except BundleError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, ValueError) as exc:
        raise BundleError("corrupt", f"the archive cannot be read ({type(exc).__name__})"
                          ) from None
    if not tree.files:
        raise BundleError("empty", "the bundle holds no regular file")
    return Manifest(tuple(members), total)


def pack(path: str | os.PathLike[str], limits: BundleLimits = DEFAULT_LIMITS) -> bytes:
    """A deterministic gzip tar of the file or directory at ``path``: members sorted by
    path, directories included, mode reduced as the checker does, mtime/uid/gid 0, no
    owner names, gzip header time 0 and no file name — the same tree gives the same bytes
    (and digest) with the same zlib. A file becomes one member named by its base name; a
    directory's contents become the members (the directory itself is the root).

    Raises PackError for a symlink, a special file, a name the checker would refuse, an
    unreadable entry or a bound of ``limits`` passed. The result always passes ``scan``.
    """
    root = Path(path)
    try:
        info = os.lstat(root)
    except OSError as exc:
        raise PackError("", f"cannot read {os.fspath(root)!r} ({exc.strerror})") from None
    if stat.S_ISREG(info.st_mode):
        entries = [(root.name, root, info)]
    elif stat.S_ISDIR(info.st_mode):
        entries = sorted(_walk(root, root, limits), key=lambda e: e[0])
    else:
        raise PackError("", "give a regular file or a directory (not a link or special file)")
    buffer = io.BytesIO()
    total = 0
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz, \
            tarfile.open(fileobj=cast(IO[bytes], gz), mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, full, st in entries:
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
            if kind == "file":
                total += st.st_size
                if total > limits.unpacked_bytes:
                    raise PackError(name, "the files pass the unpacked bound "
                                    f"({limits.unpacked_bytes} bytes)")
            tar_info = tarfile.TarInfo(name)
            tar_info.type = tarfile.DIRTYPE if kind == "dir" else tarfile.REGTYPE
            tar_info.mode = sanitized_mode(kind, st.st_mode)
            tar_info.mtime = tar_info.uid = tar_info.gid = 0
            tar_info.uname = tar_info.gname = ""
            if kind == "dir":
                tar.addfile(tar_info)
                continue
            try:
                with open(full, "rb") as fh:
                    data = fh.read(st.st_size + 1)
            except OSError as exc:
                raise PackError(name, f"cannot be read ({exc.strerror})") from None
            if len(data) != st.st_size:
                raise PackError(name, "changed while it was packed")
            tar_info.size = len(data)
            tar.addfile(tar_info, io.BytesIO(data))
    result = buffer.getvalue()
    if len(result) > limits.compressed_bytes:
        raise PackError("", f"the bundle is {len(result)} bytes compressed, more than "
                            f"{limits.compressed_bytes}")
    try:
        scan(io.BytesIO(result), limits)
    except BundleError as exc:
        raise PackError("", str(exc).partition(": ")[2]) from None
    return result


def _walk(root: Path, directory: Path, limits: BundleLimits
          ) -> list[tuple[str, Path, os.stat_result]]:
    """Every entry below ``directory`` as (member name, path, lstat); PackError for links,
    special files, bad names or too many entries."""
    found: list[tuple[str, Path, os.stat_result]] = []
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            names = sorted(os.listdir(current))
        except OSError as exc:
            raise PackError(current.relative_to(root).as_posix(),
                            f"cannot be listed ({exc.strerror})") from None
        for entry in names:
            full = current / entry
            name = full.relative_to(root).as_posix()
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                raise PackError(name, "is a symlink: bundles hold regular files and "
                                      "directories only")
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise PackError(name, "is a special file (device, FIFO or socket)")
            try:
                normalize_name(name, "this entry")
            except BundleError as exc:
                raise PackError(name, str(exc).partition(": ")[2]) from None
            found.append((name, full, st))
            if len(found) > limits.members:
                raise PackError("", f"more than {limits.members} entries")
            if stat.S_ISDIR(st.st_mode):
                pending.append(full)
    return found
