"""The worker's log uploader (``worker/upload.py``): one connection pool for every PUT, yet
each request carries exactly its grant's headers, and nothing one upload received (a cookie)
reaches the next."""

from __future__ import annotations

from pathlib import Path

import httpx

from qinglong.shared.wire import LogUploadGrant
from qinglong.worker import clock
from qinglong.worker.upload import SpoolUploader


def _grant(key: str) -> LogUploadGrant:
    return LogUploadGrant(url=f"http://s3.test/bucket/{key}",
                          headers={"x-amz-meta-ql3-attempt": key, "content-type": "text/plain"},
                          object_key=key, expires_in_s=60)


def test_puts_share_one_pool_carry_only_their_grant_headers_and_keep_no_cookie(
        tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"set-cookie": "tracker=1; Path=/"})

    spool = tmp_path / "a.log"
    spool.write_bytes(b"out\n")
    uploader = SpoolUploader(httpx.MockTransport(handler))
    try:
        uploader.put(_grant("first"), spool, deadline=clock.now() + 5)
        pool = uploader._http
        uploader.put(_grant("second"), spool, deadline=clock.now() + 5)
        assert pool is not None
        assert uploader._http is pool  # the second PUT went through the same client
    finally:
        uploader.close()
    assert [r.url.path for r in seen] == ["/bucket/first", "/bucket/second"]
    for request, key in zip(seen, ("first", "second"), strict=True):
        assert request.method == "PUT"
        assert request.content == b"out\n"
        assert dict(request.headers) == {
            "host": "s3.test", "content-length": "4", "x-amz-meta-ql3-attempt": key,
            "content-type": "text/plain"}
    assert uploader._http is None  # closed
