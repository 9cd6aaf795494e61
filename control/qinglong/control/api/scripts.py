"""Script-bundle routes: push, list, show, remove (docs/protocols.md §4.7).

Scopes: push and remove need ``operator``; reads need ``viewer``. A push's body is the gzip
tar itself (``Content-Type: application/gzip``), at most ``MAX_COMPRESSED_BYTES``; beyond
any bound of ``qinglong.shared.bundles`` the answer is 413 ``bundle_too_large``, a refused
archive 422 ``bundle_invalid`` with the checker's ``reason`` — never file content or a
member's name. Bundles are deployment-wide and content-addressed.

At most ``ApiContext.max_pushes`` pushes are received and checked at once per replica (each
spools its body, up to 32 MiB, to a temporary file past 1 MiB); more answer 429
``too_many_pushes`` with ``Retry-After`` before their body is read (docs/operations.md
"Push limits").
"""

from __future__ import annotations

import logging
import tempfile
import threading
from typing import IO, Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.models_common import ERRORS, ErrorBody
from qinglong.control.api.script_models import (
    DIGEST_PATTERN,
    MemberOut,
    ScriptDetail,
    ScriptItem,
    ScriptOut,
    ScriptPage,
)
from qinglong.control.api.security import require
from qinglong.control.auth.tokens import Principal
from qinglong.control.bundles import records
from qinglong.control.bundles.errors import (
    BundleInUseError,
    BundleStoreError,
    UnknownBundleError,
)
from qinglong.control.bundles.objects import delete_bundle
from qinglong.control.bundles.push import push_bundle
from qinglong.shared.bundles import MAX_COMPRESSED_BYTES, BundleError, BundleTooLargeError

_log = logging.getLogger("qinglong.control.api")
router = APIRouter(tags=["scripts"], responses=ERRORS)
Viewer = Annotated[Principal, Depends(require("viewer"))]
Operator = Annotated[Principal, Depends(require("operator"))]
Digest = Annotated[str, Path(pattern=DIGEST_PATTERN)]
Cursor = Annotated[str | None, Query(pattern=DIGEST_PATTERN)]
Limit = Annotated[int, Query(ge=1, le=200)]
MEDIA_TYPES = ("application/gzip", "application/x-gzip")
PUSH_PATH = "/v1/scripts"
IN_MEMORY_BYTES = 1024 * 1024
"""A push body stays in memory up to this many bytes, then spools to the temporary
directory."""
RETRY_AFTER_S = 2
_PUSH_DOC: dict[str, Any] = {
    "openapi_extra": {"requestBody": {"required": True, "content": {
        "application/gzip": {"schema": {"type": "string", "format": "binary",
                                        "maxLength": MAX_COMPRESSED_BYTES}}}}},
    "responses": {
        200: {"model": ScriptOut, "description": "the same bytes were pushed before"},
        413: {"model": ErrorBody, "description": "bundle_too_large"},
        415: {"model": ErrorBody, "description": "unsupported_media_type"},
        422: {"model": ErrorBody, "description": "bundle_invalid (with its reason)"},
        429: {"model": ErrorBody, "description": "too_many_pushes (retry after the "
                                                 "Retry-After seconds)"},
        503: {"model": ErrorBody, "description": "bundle_store_unavailable"}},
}


def _store_unavailable(exc: BundleStoreError) -> ApiError:
    return ApiError(503, exc.code, str(exc))


class PushSlots:
    """At most ``size`` pushes at once in this process: ``take()`` is True when a slot was
    free (then ``give()`` returns it), False at once otherwise. Thread-safe."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._free <= 0:
                return False
            self._free -= 1
            return True

    def give(self) -> None:
        with self._lock:
            self._free += 1


def _too_large() -> ApiError:
    return ApiError(413, "bundle_too_large", "the bundle passes the compressed bound "
                    f"({MAX_COMPRESSED_BYTES} bytes)", reason="too_large_compressed")


async def _spooled_body(request: Request) -> IO[bytes]:
    """The request body in a temporary file (memory up to IN_MEMORY_BYTES), refused with
    413 once it passes MAX_COMPRESSED_BYTES. The caller closes it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_COMPRESSED_BYTES:
        raise _too_large()
    body = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES)  # noqa: SIM115
    try:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_COMPRESSED_BYTES:
                raise _too_large()
            body.write(chunk)
    except BaseException:
        body.close()
        raise
    return body


@router.post(PUSH_PATH, status_code=201, response_model=ScriptOut, **_PUSH_DOC)
async def push_script(request: Request, response: Response, who: Operator) -> ScriptOut:
    """Push a bundle (operator): 201 when new, 200 when the same bytes were pushed before;
    429 ``too_many_pushes`` while this replica already handles ``max_pushes``."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media not in MEDIA_TYPES:
        raise ApiError(415, "unsupported_media_type",
                       "send the gzip tar with Content-Type: application/gzip")
    ctx = get_context(request)
    slots = ctx.extras.setdefault("push_slots", PushSlots(ctx.max_pushes))
    if not slots.take():
        raise ApiError(429, "too_many_pushes", "this replica checks as many pushes as it "
                       "may at once; retry later", retry_after_s=RETRY_AFTER_S)
    try:
        body = await _spooled_body(request)
        try:
            row, created = await run_in_threadpool(push_bundle, ctx.engine, ctx.s3,
                                                   ctx.bucket, body, who.name)
        finally:
            body.close()
    except BundleTooLargeError as exc:
        raise ApiError(413, exc.code, str(exc).partition(": ")[2], reason=exc.reason) from None
    except BundleError as exc:
        raise ApiError(422, exc.code, str(exc).partition(": ")[2], reason=exc.reason) from None
    except BundleStoreError as exc:
        raise _store_unavailable(exc) from None
    finally:
        slots.give()
    response.status_code = 201 if created else 200
    return ScriptOut(**{f: row[f] for f in ScriptOut.model_fields})


@router.get("/v1/scripts", response_model=ScriptPage)
def list_scripts(request: Request, _who: Viewer, cursor: Cursor = None,
                 limit: Limit = 50) -> ScriptPage:
    """Bundles ordered by digest; keyset pages (``cursor``: the last digest seen)."""
    ctx = get_context(request)
    with ctx.engine.connect() as conn:
        rows = records.page(conn, cursor, limit)
    items = [ScriptItem(**{f: r[f] for f in ScriptItem.model_fields}) for r in rows]
    return ScriptPage(items=items,
                      next_cursor=items[-1].digest if len(items) == limit else None)


@router.get("/v1/scripts/{digest}", response_model=ScriptDetail)
def show_script(digest: Digest, request: Request, _who: Viewer) -> ScriptDetail:
    """One bundle with its members and the live tasks naming it; 404 ``not_found``."""
    ctx = get_context(request)
    try:
        with ctx.engine.connect() as conn:
            row, members, names = records.detail(conn, digest)
    except UnknownBundleError:
        raise ApiError(404, "not_found", "no bundle has this digest") from None
    fields = {f: row[f] for f in ScriptItem.model_fields}
    return ScriptDetail(**fields, members=[MemberOut(**m) for m in members],
                        used_by_tasks=names)


@router.delete("/v1/scripts/{digest}", status_code=204, response_class=Response,
               responses={409: {"model": ErrorBody, "description": "bundle_in_use"}})
def remove_script(digest: Digest, request: Request, _who: Operator) -> Response:
    """Remove a bundle (operator): 204; 409 ``bundle_in_use`` while a live task names it
    or a live attempt runs it; 404 ``not_found``. The object is deleted after the row."""
    ctx = get_context(request)
    try:
        with ctx.engine.begin() as conn:
            records.remove(conn, digest)
    except UnknownBundleError:
        raise ApiError(404, "not_found", "no bundle has this digest") from None
    except BundleInUseError as exc:
        raise ApiError(409, exc.code, str(exc)) from None
    if ctx.s3 is not None and ctx.bucket:
        try:
            delete_bundle(ctx.s3, ctx.bucket, digest)
        except BundleStoreError as exc:  # the row is gone; a re-push puts the object back
            _log.warning("bundle %s: object not deleted (%s)", digest, exc.cause)
    return Response(status_code=204)
