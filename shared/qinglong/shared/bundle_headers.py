"""Our own pass over a bundle's tar headers, in front of ``tarfile`` (docs/protocols.md §4.7).

``HeaderGuard`` sits between the gzip decompressor and ``tarfile``: every byte ``tarfile``
reads came through it first, so each 512-byte header is judged before ``tarfile`` parses it.
It follows the ustar layout (size field octal or base-256) and refuses, as ``BundleError``:

- an extended header (PAX ``x``/``g``, GNU ``L``/``K``) of more than ``MAX_EXTENDED_BYTES``
  [``header_too_large``, a ``BundleTooLargeError``] — before ``tarfile`` would read all of
  it into memory — or more than ``MAX_EXTENDED_CHAIN`` of them before one member;
- a sparse PAX record (``GNU.sparse.*``), a ``size`` record in a global PAX header (a
  local one sets the next member's size, as in ``tarfile``), a PAX block that does not
  parse, a header whose checksum or size field is wrong, a directory or link header that
  carries data, a name ending in ``/`` on anything but an empty directory [``corrupt``]; a
  member type other than file, directory, link, device or FIFO [``special_file``];
- any header after the first end-of-archive block, anything but zero bytes after the two
  end-of-archive blocks, and an archive that ends without them [``corrupt``]: ``tarfile``
  would silently end the archive at such a block, and the digest would cover bytes the
  manifest does not list.

``members`` counts the member headers seen; the scanner compares it with what ``tarfile``
gave, so the two parsers never disagree silently.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

from qinglong.shared.bundle_errors import BundleError, BundleTooLargeError

BLOCK = 512
MAX_EXTENDED_BYTES = 64 * 1024
MAX_EXTENDED_CHAIN = 4
_EXTENDED = frozenset(b"xgLK")
_PAX = frozenset(b"xg")
_WITH_DATA = frozenset(b"07\x00")  # regular (and contiguous) files: data follows
_NO_DATA = frozenset(b"123456")  # links, devices, directory, FIFO
_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")


def _octal(field: bytes) -> int | None:
    """The number of a ustar numeric field (octal, or base-256 when the first byte has its
    top bit set); None when it does not parse or is negative."""
    if field[:1] == b"\x80":
        return int.from_bytes(field[1:], "big")
    if field[:1] and field[0] & 0x80:
        return None  # negative base-256
    text = field.split(b"\x00", 1)[0].strip(b" ")
    if not text:
        return 0
    if any(c not in b"01234567" for c in text):
        return None
    return int(text, 8)


def _checksum_ok(block: bytes) -> bool:
    stored = _octal(block[148:156])
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
    signed = unsigned - 2 * sum(b for b in block[:148] + block[156:] if b > 127)
    return stored is not None and stored in (unsigned, signed)


def _check_pax(data: bytes, where: str, local: bool) -> int | None:
    """The member size a PAX block sets (``size``, honoured in a ``local`` block only, as
    ``tarfile`` does), else None. BundleError for a block that does not parse, a sparse
    record, or a ``size`` in a global block."""
    pos, size = 0, None
    while pos < len(data) and data[pos] != 0:
        match = _PAX_RECORD.match(data, pos)
        length = int(match.group(1)) if match else 0
        if match is None or length <= match.end() - pos or data[pos + length - 1:
                                                                  pos + length] != b"\n":
            raise BundleError("corrupt", f"{where} has an extended header that does not parse")
        key = match.group(2)
        if key == b"size":
            value = data[match.end():pos + length - 1]
            if not local or not value.isdigit():
                raise BundleError("corrupt", f"{where} has an extended header that moves "
                                             "its data")
            size = int(value)
        elif key.startswith(b"GNU.sparse"):
            raise BundleError("corrupt", f"{where} has an extended header that moves its data")
        pos += length
    return size


class HeaderGuard(io.RawIOBase):
    """A read-only stream over ``read`` (the decompressed tar) that checks the tar structure
    of every byte passing through (see the module docstring); ``finish()`` after the last
    read raises unless the archive ended with its end-of-archive blocks."""

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self._read = read
        self._block = bytearray()  # the header block being collected
        self._skip = 0  # data bytes (with padding) still to pass before the next header
        self._extended = bytearray()  # an extended header's data being collected
        self._extended_left = 0
        self._extended_type = 0
        self._chain = 0
        self._pax_size: int | None = None  # a local PAX header's size for the next member
        self._zero_blocks = 0
        self.members = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._read(len(buffer))
        self._feed(memoryview(data))
        buffer[: len(data)] = data
        return len(data)

    def finish(self) -> None:
        """Raise BundleError (``corrupt``) unless the stream ended after the two
        end-of-archive blocks (and only zeros after them)."""
        if self._zero_blocks < 2 or self._block:
            raise BundleError("corrupt", "the archive does not end with its end-of-archive "
                                         "blocks")

    def _where(self) -> str:
        return f"member {self.members + 1}"

    def _feed(self, data: memoryview) -> None:
        while data:
            if self._zero_blocks >= 2:
                if data.tobytes().lstrip(b"\x00"):  # C speed: the tail may be long
                    raise BundleError("corrupt", "the archive holds data after its end")
                return
            if self._skip:
                step = min(self._skip, len(data))
                self._skip -= step
                data = data[step:]
            elif self._extended_left:
                step = min(self._extended_left, len(data))
                self._extended += data[:step]
                self._extended_left -= step
                data = data[step:]
                if not self._extended_left:
                    self._extended_done()
            else:
                step = min(BLOCK - len(self._block), len(data))
                self._block += data[:step]
                data = data[step:]
                if len(self._block) == BLOCK:
                    block, self._block = bytes(self._block), bytearray()
                    self._header(block)

    def _header(self, block: bytes) -> None:
        where = self._where()
        if not any(block):
            if self._chain:
                raise BundleError("corrupt", f"{where} has an extended header and no member")
            self._zero_blocks += 1
            return
        if self._zero_blocks:
            raise BundleError("corrupt", f"{where} follows an end-of-archive block")
        size = _octal(block[124:136])
        if size is None or not _checksum_ok(block):
            raise BundleError("corrupt", f"{where} has a damaged header")
        kind = block[156]
        padded = -(-size // BLOCK) * BLOCK
        if kind in _EXTENDED:
            self._chain += 1
            if size > MAX_EXTENDED_BYTES:
                raise BundleTooLargeError("header_too_large", f"{where} has an extended "
                                          f"header over {MAX_EXTENDED_BYTES} bytes")
            if self._chain > MAX_EXTENDED_CHAIN:
                raise BundleError("corrupt", f"{where} has too many extended headers")
            self._extended_type, self._extended = kind, bytearray()
            self._extended_left = padded
            if not padded:
                self._extended_done()
            return
        self._chain = 0
        self.members += 1
        if self._pax_size is not None:
            size, self._pax_size = self._pax_size, None
            padded = -(-size // BLOCK) * BLOCK
        if block[:100].split(b"\x00", 1)[0].endswith(b"/"):
            if kind not in b"5\x00" or size:
                raise BundleError("corrupt", f"{where} has a name ending in '/' and is not "
                                             "an empty directory")
            return  # tarfile reads an old-style file named so as a directory
        if kind in _NO_DATA:
            if size:
                raise BundleError("corrupt", f"{where} is a directory or link that carries "
                                             "data")
        elif kind in _WITH_DATA:
            self._skip = padded
        else:
            raise BundleError("special_file", f"{where} is not a regular file or directory")

    def _extended_done(self) -> None:
        if self._extended_type in _PAX:
            size = _check_pax(bytes(self._extended), self._where(),
                              local=self._extended_type == ord("x"))
            if size is not None:
                self._pax_size = size
        self._extended = bytearray()
