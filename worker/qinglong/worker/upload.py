"""Uploading an attempt's spool to the presigned PUT that control granted (docs/protocols.md §4.2
"Logs"). The worker holds no bucket credentials: the URL and its signed headers are all it has.

The request carries exactly the granted headers (metadata, checksum, content type and length
are signed), plus only what HTTP itself needs (Host, and Content-Length when the grant does not
name it); never the worker's bearer token, nor httpx's default Accept/User-Agent headers.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_before_delay,
    wait_exponential,
    wait_random,
)

from qinglong.shared.wire import LogUploadGrant
from qinglong.worker import clock
from qinglong.worker.errors import ControlRejectedError, ControlUnavailableError


class ObjectStoreUnavailableError(ControlUnavailableError):
    """The object store (S3) did not take the PUT before the deadline: a connection error or
    5xx on every try (``cause`` names the last). Not control's failure: the message says S3."""

    def __str__(self) -> str:
        return f"object store (S3) unavailable: {self.cause}"


class _RetryableError(Exception):
    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def _read_chunks(path: Path, size: int = 65536) -> Iterator[bytes]:
    """The file's bytes, ``size`` at a time (opened O_NOFOLLOW, closed at the end)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(size):
            yield chunk


class SpoolUploader:
    """PUTs spools to presigned URLs through one shared connection pool (thread-safe).

    One ``httpx.Client`` for the worker's life, made on first use: building a client builds
    a TLS context (tens of ms of CPU), which a client per upload paid on every attempt. Each
    request is built on its own (``httpx.Request``), never from the client's defaults or
    cookie jar, so it carries exactly the granted headers. ``close()`` ends the pool
    (idempotent). ``transport`` lets tests route the PUTs.
    """

    def __init__(self, transport: httpx.BaseTransport | None = None) -> None:
        self._transport = transport
        self._http: httpx.Client | None = None
        self._lock = threading.Lock()

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._http is None:
                self._http = httpx.Client(timeout=30.0, follow_redirects=False,
                                          transport=self._transport)
            return self._http

    def close(self) -> None:
        """Close the connection pool (a later put opens a new one)."""
        with self._lock:
            http, self._http = self._http, None
        if http is not None:
            http.close()

    def put(self, grant: LogUploadGrant, path: Path, deadline: float) -> None:
        """PUT the bytes of ``path`` to ``grant.url`` with exactly ``grant.headers`` (and
        Content-Length from the file when the grant does not name it), streamed from the
        file: the worker's memory does not grow with the log's size.

        Retries connection errors and 5xx with backoff, never past ``deadline`` (monotonic
        s) nor past the grant's ``expires_in_s``. Raises ObjectStoreUnavailableError when out
        of time and ControlRejectedError on a 4xx from the object store (e.g. 403: signature
        mismatch).
        """
        size = path.stat().st_size
        headers = dict(grant.headers)
        if not any(name.lower() == "content-length" for name in headers):
            headers["Content-Length"] = str(size)  # streamed: never chunked (S3 refuses it)
        deadline = min(deadline, clock.now() + grant.expires_in_s)
        http = self._client()

        def once() -> None:
            left = deadline - clock.now()
            if left <= 0:
                raise _RetryableError("deadline passed")
            # built alone: no default headers, no cookies (httpx adds Host); the body is
            # read from the spool 64 KiB at a time, never held whole in memory
            request = httpx.Request("PUT", grant.url, content=_read_chunks(path),
                                    headers=headers,
                                    extensions={"timeout": httpx.Timeout(
                                        min(30.0, left)).as_dict()})
            try:
                response = http.send(request)
                response.close()
            except httpx.TransportError as exc:
                raise _RetryableError(type(exc).__name__) from None
            finally:
                http.cookies.clear()  # never kept: nothing of one upload reaches another
            if response.status_code >= 500:
                raise _RetryableError(f"HTTP {response.status_code}")
            if response.status_code >= 300:
                raise ControlRejectedError(response.status_code, "log_put_refused")

        retrying = Retrying(
            retry=retry_if_exception_type(_RetryableError),
            wait=wait_exponential(multiplier=0.1, max=2.0) + wait_random(0, 0.3),
            stop=stop_before_delay(max(0.0, deadline - clock.now())),
            reraise=True,
        )
        try:
            retrying(once)
        except _RetryableError as exc:
            raise ObjectStoreUnavailableError(f"log upload: {exc.cause}") from None


def put_spool(grant: LogUploadGrant, path: Path, deadline: float,
              transport: httpx.BaseTransport | None = None) -> None:
    """One PUT through a client of its own (``SpoolUploader.put``'s rules), closed after."""
    uploader = SpoolUploader(transport)
    try:
        uploader.put(grant, path, deadline)
    finally:
        uploader.close()
