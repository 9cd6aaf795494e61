"""``GET /v1/attempts/{id}/log``: an attempt's log against retention (docs/protocols.md §4.4).

200 with the bytes (``text/plain``): the stored object, or while no object is recorded the
attempt's live chunk rows (a running attempt's log so far; an ended attempt's partial log,
``QL3-Log-Partial: 1``; docs/protocols.md §4.9), or an empty body for an attempt that
completed without output (``no_output``, docs/protocols.md §4.2); 404 ``log_not_found`` when
no log was recorded for a finished attempt (e.g. lost before any output) or no attempt has the id
(``log_pending`` only for a live attempt whose rows cannot be read); 410
``log_retired`` with ``retired_at`` and ``outcome`` (deleted / already_absent) when retention
retired it; 503 ``log_unavailable`` when the object is missing without a tombstone or the
store is unreachable or not configured (retry later) — never a fake "retired". A tombstone or
object that fails its integrity check is not served (fail closed) and answers 503 with its own
stable code, ``tombstone_integrity_mismatch`` or ``artifact_integrity_mismatch``: a documented
state of the stored data that an operator must look at, not a fault of the request nor of the
server (a 5xx other than this documented 503 would be a bug).

The read itself is ``retention/read_path.read_attempt_log``, reached through the thin
adapter ``_gate`` (a psycopg connection borrowed from the SQLAlchemy pool), so the read path
can move to the engine without this module changing its answers. With ``offset``/``tail``
(the raw read) or ``follow=1`` (Server-Sent Events) the route answers through
``api/log_live.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError, error_body
from qinglong.control.api.models_common import ERRORS, ErrorBody
from qinglong.control.api.security import require

if TYPE_CHECKING:
    from sqlalchemy import Engine

router = APIRouter(tags=["logs"], responses=ERRORS)
UNAVAILABLE = (
    "The log cannot be served now; ``error.code`` says why. ``log_unavailable``: the object "
    "is missing without a tombstone, or the store is unreachable or not configured (retry "
    "later). ``artifact_integrity_mismatch``: the stored object differs from its record "
    "(size, checksum, identity metadata or version). ``tombstone_integrity_mismatch``: the "
    "log's retirement record fails its integrity check. The last two fail closed and persist "
    "until an operator repairs the record or the object."
)


NOT_FOUND = (
    "No log to serve; ``error.code`` says why. ``log_not_found``: no attempt has this id, or "
    "it finished without any log (e.g. lost before any output). ``log_pending`` (older "
    "replicas): the attempt has not finished; ask again later."
)
UNFINISHED = frozenset({"claimed", "starting", "running"})


def _attempt_status(engine: Engine, attempt_id: str) -> str | None:
    """The attempt's status (one indexed read), or None when no attempt has this id."""
    with engine.connect() as conn:
        status = conn.exec_driver_sql("SELECT status FROM attempts WHERE id = %(id)s",
                                      {"id": attempt_id}).scalar()
    return None if status is None else str(status)


class RetiredDetail(BaseModel):
    """``code`` ``log_retired``; when and how retention retired the log."""

    code: str
    message: str
    retired_at: datetime
    outcome: str


class RetiredBody(BaseModel):
    """The 410 answer."""

    error: RetiredDetail


@router.get(
    "/v1/attempts/{attempt_id}/log",
    dependencies=[Depends(require("viewer"))],
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}},
                          "application/octet-stream": {"schema": {"type": "string",
                                                                  "format": "binary"}},
                          "text/event-stream": {"schema": {"type": "string"}}},
              "description": "the log's bytes: ``text/plain`` (the whole log), "
                             "``application/octet-stream`` with ``offset``/``tail`` (the "
                             "raw read; ``QL3-Log-*`` headers), ``text/event-stream`` with "
                             "``follow=1`` (docs/protocols.md §4.4)"},
        404: {"model": ErrorBody, "description": NOT_FOUND},
        410: {"model": RetiredBody, "description": "retired by retention"},
        503: {"model": ErrorBody, "description": UNAVAILABLE},
    },
)
async def get_log(
    attempt_id: UUID, request: Request,
    offset: Annotated[int | None, Query(ge=0, description="raw byte offset")] = None,
    tail: Annotated[int | None, Query(ge=0, description="start at max(0, end - tail)")] = None,
    wait: Annotated[float, Query(ge=0, le=25, description="long-poll seconds")] = 0,
    follow: Annotated[int, Query(ge=0, le=1, description="1: Server-Sent Events")] = 0,
    from_: Annotated[Literal["head", "tail"], Query(alias="from")] = "tail",
) -> Response:
    """The attempt's log (viewer), docs/protocols.md §4.4. Without ``offset``/``tail``/
    ``follow``: 200 / 404 / 410 / 503 with the whole log (a running or partial log from its
    live rows, gaps shown as marker lines); with ``offset`` or ``tail``: the raw read; with
    ``follow=1``: Server-Sent Events (``api/log_live.py``)."""
    from qinglong.control.api.log_live import follow_answer, raw_answer
    from qinglong.control.livelog.read import LogGoneError

    ctx = get_context(request)
    aid = str(attempt_id)
    try:
        if follow:
            last = request.headers.get("last-event-id", "").strip()
            start = int(last) if last.isdigit() else None
            return await follow_answer(ctx, aid, start=start, from_head=from_ == "head",
                                 token_ok=_token_check(request))
        if offset is not None or tail is not None:
            if offset is not None and tail is not None:
                raise ApiError(422, "invalid_request", "give offset or tail, not both")
            return await raw_answer(ctx, aid, offset=offset, tail=tail, wait_s=wait)
    except LogGoneError as exc:
        if exc.kind == "retired" and exc.retired_at is not None:
            return _retired(exc.retired_at, exc.outcome)
        if exc.kind == "not_found":
            raise ApiError(404, "log_not_found", "no log was recorded for this attempt") \
                from None
        if exc.kind == "unavailable":
            raise ApiError(503, "log_unavailable", "the log is unavailable; retry later") \
                from None
        # "tombstone": through the verified read path below (fail closed on tampering)
    return await run_in_threadpool(_whole_log, request, attempt_id)


def _retired(retired_at: datetime, outcome: str | None) -> JSONResponse:
    return JSONResponse(error_body("log_retired", "the log was retired by retention",
                                   retired_at=retired_at.isoformat(), outcome=outcome),
                        status_code=410)


def _token_check(request: Request) -> Any:
    """A blocking callable: True while the request's bearer token is still valid."""
    from qinglong.control.auth.tokens import authenticate

    header = request.headers.get("authorization", "")
    token = header.partition(" ")[2].strip()
    ctx = get_context(request)

    def check() -> bool:
        try:
            with ctx.engine.connect() as conn:
                return authenticate(conn, token) is not None
        except Exception:  # the database is away: keep the stream, check at the next beat
            return True

    return check


def _live_text(request: Request, attempt_id: str) -> Response | None:
    """A running or partial log from its live rows as text (gaps as marker lines), the
    empty complete log of an attempt completed without output, 410 when the partial log
    was retired, or None when the attempt has no live rows."""
    from qinglong.control.livelog.read import LogGoneError, read_raw

    ctx = get_context(request)
    try:
        piece = read_raw(ctx.engine, ctx.s3, attempt_id, offset=0, empty_ok=False)
    except LogGoneError as exc:
        if exc.kind == "retired" and exc.retired_at is not None:
            return _retired(exc.retired_at, exc.outcome)
        return None
    parts, status, partial = [], piece.status, piece.partial
    for _ in range(64):
        if piece.gap:
            parts.append(f"\n[ql3: {piece.gap} bytes not shown]\n".encode())
        parts.append(piece.body)
        if piece.next >= piece.end:
            break
        piece = read_raw(ctx.engine, ctx.s3, attempt_id, offset=piece.next)
    return Response(b"".join(parts), media_type="text/plain; charset=utf-8",
                    headers={"QL3-Attempt-Status": status, "QL3-Log-Partial":
                             "1" if partial else "0", "QL3-Log-Next": str(piece.next),
                             "QL3-Log-State": "complete" if partial or piece.complete
                             else "running"})


def _whole_log(request: Request, attempt_id: UUID) -> Response:
    """The whole log, as before live logs, except that live rows answer while an attempt
    runs (and for an ended attempt without a stored log: its partial log)."""
    from qinglong.control.retention.objects import ArtifactIntegrityMismatchError
    from qinglong.control.retention.read_path import (
        S3LogReader,
        TombstoneIntegrityError,
        read_attempt_log,
    )
    from qinglong.shared.errors import InvalidIdentifierError

    ctx = get_context(request)
    if ctx.s3 is None:
        raise ApiError(503, "log_unavailable", "no log store is configured")
    from qinglong.control.retention.read_path import ConnectionGate

    gate = ConnectionGate(ctx.engine)
    reader = S3LogReader(ctx.s3, in_transaction=gate.held)
    try:
        result = read_attempt_log(gate, reader, str(attempt_id))
    except TombstoneIntegrityError:
        raise ApiError(503, "tombstone_integrity_mismatch",
                       "the log's retirement record fails its integrity check") from None
    except InvalidIdentifierError:  # not a UUIDv7: no attempt of ours has this id
        raise ApiError(404, "log_not_found", "no log was recorded for this attempt") from None
    except ArtifactIntegrityMismatchError:
        raise ApiError(503, "artifact_integrity_mismatch",
                       "the stored log differs from its record") from None
    if result.status == 200:
        return Response(result.body or b"", media_type="text/plain; charset=utf-8")
    if result.status == 404:
        live = _live_text(request, str(attempt_id))
        if live is not None:
            return live
        if _attempt_status(ctx.engine, str(attempt_id)) in UNFINISHED:
            raise ApiError(404, "log_pending",
                           "the attempt has not finished; its log is uploaded when it ends")
        raise ApiError(404, "log_not_found", "no log was recorded for this attempt")
    if result.status == 410:
        assert result.retired_at is not None
        return _retired(result.retired_at, result.outcome)
    raise ApiError(503, "log_unavailable", "the log is unavailable; retry later")
