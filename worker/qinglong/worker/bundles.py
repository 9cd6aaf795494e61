"""Script bundles on a worker: fetch, verify, cache, check out per attempt (docs/protocols.md
§4.7).

For an attempt that names a bundle, before anything of it runs:

1. the bytes come from the cache (``<spool>/bundles/<digest>.tgz``, 0600 in a 0700
   directory) when a copy there still hashes to the digest — a copy that does not is
   dropped — else through a presigned GET that control grants for the attempt's live lease
   (the worker holds no bucket credentials), streamed and bounded;
2. either way they are copied into an unnamed temporary file while hashed, and only that
   private copy is used: the SHA-256 and size must equal the digest (else
   ``bundle_mismatch``). A verified download is stored in the cache;
3. the private copy is extracted into a fresh 0700 directory ``<spool>/work/<attempt id>``
   with our member checks (``bundle_extract``; else ``bundle_invalid``), and the entry
   point must be a regular file of it (else ``bundle_invalid``).

A failure raises BundleFailure with its class; the runner completes the attempt ``failed``
with that reason and runs nothing. The directory is the attempt's working directory and is
removed after the attempt (``remove_tree``); one attempt never sees another's copy, and no
attempt reads the cache itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import stat
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
    wait_random,
)

from qinglong.shared.bundles import DEFAULT_LIMITS, BundleError, BundleLimits
from qinglong.shared.digest import digests_equal
from qinglong.shared.wire import BundleGrant, ClaimedAttempt
from qinglong.worker import clock
from qinglong.worker.bundle_extract import extract, remove_tree
from qinglong.worker.errors import LeaseLostError, WorkerError
from qinglong.worker.spool_dir import prepare_spool_dir as _private_dir

log = logging.getLogger("qinglong.worker")
CHUNK = 65536
CACHE_BYTES_DEFAULT = 256 * 1024 * 1024
CACHE_SUFFIX = ".tgz"
FAILURE_CLASSES = ("bundle_mismatch", "bundle_invalid", "bundle_unavailable")
_DEFAULT_HEADERS = ("accept", "accept-encoding", "connection", "user-agent")


class BundleFailure(WorkerError):  # noqa: N818  (a failure class the attempt reports)
    """The attempt's bundle cannot be used; ``reason`` is its failure class
    (``FAILURE_CLASSES``). Nothing of the attempt ran."""

    code = "bundle_failed"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Checkout:
    """An attempt's private copy: ``directory`` (its working directory) and the
    ``command`` to run there."""

    directory: Path
    command: list[str]


class _Retry(Exception):  # noqa: N818  (control flow inside this module)
    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


class BundleStore:
    """The cache and per-attempt directories below the worker's private spool directory.
    ``cache_bytes`` bounds the cache (least recently used copies go first); ``transport``
    lets tests route the GET; ``work_dir`` holds the per-attempt copies (default
    ``<spool>/work``; an isolated worker's attempt root, prepared by ``isolation.py``).
    Raises SpoolError when a directory is unsafe."""

    def __init__(self, spool_dir: Path, *, limits: BundleLimits = DEFAULT_LIMITS,
                 cache_bytes: int = CACHE_BYTES_DEFAULT,
                 transport: httpx.BaseTransport | None = None,
                 work_dir: Path | None = None) -> None:
        self.cache_dir = _private_dir(spool_dir / "bundles")
        self.work_dir = work_dir if work_dir is not None else _private_dir(spool_dir / "work")
        self._limits = limits
        self._cache_bytes = cache_bytes
        self._transport = transport

    def checkout(self, attempt: ClaimedAttempt, grant: Callable[[], BundleGrant],
                 deadline: float) -> Checkout:
        """Verify and extract ``attempt``'s bundle into a fresh directory; its command.
        ``grant()`` asks control for a presigned GET (only on a cache miss); LeaseLostError
        from it propagates. BundleFailure for every other failure, with nothing left."""
        digest = attempt.bundle_digest
        entry_point = attempt.entry_point
        assert digest is not None
        assert entry_point is not None
        target = self.work_dir / attempt.lease.attempt_id
        with tempfile.TemporaryFile(dir=self.cache_dir) as copy:
            if not self._from_cache(digest, copy):
                self._download(self._grant(grant), digest, copy, deadline)
                self._store(digest, copy)
            copy.seek(0)
            try:
                manifest = extract(copy, target, self._limits)
            except BundleError as exc:
                raise BundleFailure("bundle_invalid", f"bundle refused: {exc}") from None
            except OSError as exc:
                raise BundleFailure("bundle_unavailable", "bundle cannot be extracted "
                                    f"({exc.strerror})") from None
        if not manifest.is_file(entry_point):
            remove_tree(target)
            raise BundleFailure("bundle_invalid", "the entry point is not a file of the bundle")
        return Checkout(target, _command(attempt, target, entry_point))

    def _grant(self, grant: Callable[[], BundleGrant]) -> BundleGrant:
        try:
            return grant()
        except LeaseLostError:
            raise
        except WorkerError as exc:
            raise BundleFailure("bundle_unavailable", f"no bundle grant: {exc}") from None

    def _from_cache(self, digest: str, copy: IO[bytes]) -> bool:
        """Copy a cached bundle into ``copy`` when it hashes to ``digest``; a copy that does
        not is removed. False on a miss."""
        path = self.cache_dir / f"{digest}{CACHE_SUFFIX}"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode) or info.st_size > self._limits.compressed_bytes:
                ok = False
            else:
                got = _copy_hashed(fh.read, copy, self._limits.compressed_bytes)
                ok = got is not None and digests_equal(got, digest)
        if not ok:
            log.warning("cached bundle %s failed verification: dropped", digest)
            with contextlib.suppress(OSError):
                os.unlink(path)
            copy.seek(0)
            copy.truncate()
            return False
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used
        return True

    def _download(self, grant: BundleGrant, digest: str, copy: IO[bytes],
                  deadline: float) -> None:
        """GET the granted URL into ``copy`` (bounded), retrying transport errors and 5xx
        until ``deadline`` or the grant's expiry; BundleFailure for a refusal, a timeout, or
        bytes that are not exactly the digest."""
        if grant.digest != digest:
            raise BundleFailure("bundle_mismatch", "control granted another bundle")
        cap = min(grant.size_bytes, self._limits.compressed_bytes)
        deadline = min(deadline, clock.now() + grant.expires_in_s)
        with httpx.Client(timeout=30.0, follow_redirects=False,
                          transport=self._transport) as http:
            for name in _DEFAULT_HEADERS:
                http.headers.pop(name, None)

            def once() -> str:  # the hex digest, "" past the size cap
                left = deadline - clock.now()
                if left <= 0:
                    raise _Retry("deadline passed")
                copy.seek(0)
                copy.truncate()
                try:
                    with http.stream("GET", grant.url, timeout=min(30.0, left)) as response:
                        if response.status_code >= 500:
                            raise _Retry(f"HTTP {response.status_code}")
                        if response.status_code != 200:
                            raise BundleFailure("bundle_unavailable", "the bundle GET was "
                                                f"refused ({response.status_code})")
                        got = _copy_hashed(_Chunks(response.iter_bytes(CHUNK)).read, copy, cap)
                        return got or ""
                except httpx.TransportError as exc:
                    raise _Retry(type(exc).__name__) from None

            retrying = Retrying(
                retry=retry_if_exception_type(_Retry),
                wait=wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.3),
                stop=stop_before_delay(max(0.0, deadline - clock.now())), reraise=True)
            try:
                got = retrying(once)
            except _Retry as exc:
                raise BundleFailure("bundle_unavailable",
                                    f"the bundle could not be fetched ({exc.cause})") from None
        if not got or not digests_equal(got, digest) or copy.tell() != grant.size_bytes:
            raise BundleFailure("bundle_mismatch",
                                "the fetched bundle does not match its digest")

    def _store(self, digest: str, copy: IO[bytes]) -> None:
        """Keep the verified ``copy`` in the cache (best effort), then bound the cache."""
        part = self.cache_dir / f".{digest}.{secrets.token_hex(6)}.part"
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                copy.seek(0)
                while chunk := copy.read(CHUNK):
                    out.write(chunk)
            os.replace(part, self.cache_dir / f"{digest}{CACHE_SUFFIX}")
        except OSError as exc:
            log.warning("bundle %s not cached (%s)", digest, exc.strerror)
            with contextlib.suppress(OSError):
                os.unlink(part)
            return
        self._prune()

    def _prune(self) -> None:
        """Remove the least recently used cached copies beyond ``cache_bytes``."""
        entries = []
        with contextlib.suppress(OSError), os.scandir(self.cache_dir) as found:
            for entry in found:
                if entry.name.endswith(CACHE_SUFFIX) and entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    entries.append((info.st_mtime, info.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self._cache_bytes:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
            total -= size

    def release(self, checkout: Checkout) -> None:
        """Remove the attempt's directory (whatever the task did to it)."""
        remove_tree(checkout.directory)


class _Chunks:
    """A ``read(n)`` view of an iterator of byte chunks."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._it = chunks
        self._rest = b""

    def read(self, n: int) -> bytes:
        while not self._rest:
            try:
                self._rest = next(self._it)
            except StopIteration:
                return b""
        data, self._rest = self._rest[:n], self._rest[n:]
        return data


def _copy_hashed(read: Callable[[int], bytes], copy: IO[bytes], cap: int) -> str | None:
    """Copy ``read(CHUNK)`` chunks into ``copy``; the hex SHA-256, or None once more than
    ``cap`` bytes came (the copy is then incomplete and must not be used)."""
    digest = hashlib.sha256()
    size = 0
    while chunk := read(CHUNK):
        size += len(chunk)
        if size > cap:
            return None
        digest.update(chunk)
        copy.write(chunk)
    return digest.hexdigest()


def _command(attempt: ClaimedAttempt, directory: Path, entry_point: str) -> list[str]:
    """argv as given, or ``/bin/sh -c shell``; with neither, the entry point itself: run
    directly (made owner-executable) when it starts with ``#!``, else through /bin/sh."""
    if attempt.argv is not None:
        return list(attempt.argv)
    if attempt.shell is not None:
        return ["/bin/sh", "-c", attempt.shell]
    entry = directory / entry_point
    fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        shebang = os.read(fd, 2) == b"#!"
        if shebang:
            os.fchmod(fd, os.fstat(fd).st_mode & 0o777 | stat.S_IXUSR)
    finally:
        os.close(fd)
    return [str(entry)] if shebang else ["/bin/sh", str(entry)]
