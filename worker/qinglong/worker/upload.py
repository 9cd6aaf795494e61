"""Uploading an attempt's spool to the presigned PUT that control granted (docs/protocols.md §4.2
"Logs"). The worker holds no bucket credentials: the URL and its signed headers are all it has.

The request carries exactly the granted headers (metadata, checksum, content type and length
are signed), plus only what HTTP itself needs (Host, and Content-Length when the grant does not
name it); never the worker's bearer token, nor httpx's default Accept/User-Agent headers.
"""

from __future__ import annotations

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

_DEFAULT_HEADERS = ("accept", "accept-encoding", "connection", "user-agent")


class _RetryableError(Exception):
    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def put_spool(grant: LogUploadGrant, path: Path, deadline: float,
              transport: httpx.BaseTransport | None = None) -> None:
    """PUT the bytes of ``path`` to ``grant.url`` with exactly ``grant.headers``.

    Retries connection errors and 5xx with backoff, never past ``deadline`` (monotonic s) nor
    past the grant's ``expires_in_s``. Raises ControlUnavailableError when out of time and
    ControlRejectedError on a 4xx from the object store (e.g. 403: signature mismatch).
    """
    data = path.read_bytes()
    deadline = min(deadline, clock.now() + grant.expires_in_s)
    with httpx.Client(timeout=30.0, follow_redirects=False, transport=transport) as http:
        for name in _DEFAULT_HEADERS:
            http.headers.pop(name, None)

        def once() -> None:
            left = deadline - clock.now()
            if left <= 0:
                raise _RetryableError("deadline passed")
            request = http.build_request("PUT", grant.url, content=data,
                                         headers=grant.headers, timeout=min(30.0, left))
            try:
                response = http.send(request)
            except httpx.TransportError as exc:
                raise _RetryableError(type(exc).__name__) from None
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
            raise ControlUnavailableError(f"log upload: {exc.cause}") from None
