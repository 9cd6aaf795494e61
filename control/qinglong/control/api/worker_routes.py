"""The worker endpoints (docs/protocols.md §4.2, §4.5): the routes listed in
``qinglong.shared.wire``.

Every route needs a worker-pool token; the pool comes from the token, never from the body,
and every lease statement is fenced by it, so a worker touches only attempts leased to an
incarnation of its own pool (another pool's lease answers 409 ``lease_lost``, exactly like a
stale one). Bodies pass the bounded JSON decoder first
(``json_body.py``: size, UTF-8, depth, number length), then the wire types' strict
``from_json``; a malformed body is 422 ``invalid_request`` naming the field, never its value.
The OpenAPI document describes each body and answer with the JSON schema of its wire type.
Dispatch errors map to their ``status`` and ``code`` (``dispatch/errors.py``).

One transaction per step (docs/protocols.md §4.5): the token row is read as the first
statement of the step's own transaction (``_in_step``), so a revoked token is refused at its
next request by the database clock with no connection or round trip of its own; 401 and 403
come before 422, as when the token was read first. ``/complete`` reads the token and the
lease in its first transaction and commits it before the HEAD (``finish_completion``);
``/log-chunk`` keeps one transaction per chunk and reads the token before them.

Metrics (``ctx.metrics``): every attempt a claim hands out counts in ``ql3_claims_total``;
every 409 ``lease_lost`` answer (a write fenced off: recovered, re-claimed, expired or another
pool's lease) counts in ``ql3_leases_lost_total{reason="fenced"}``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from qinglong.control.api.context import ApiContext, get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.security import authorize, bearer_token, require
from qinglong.control.auth.tokens import Principal
from qinglong.control.db.engine import InTransaction
from qinglong.control.dispatch.bundle_grant import grant_bundle_fetch
from qinglong.control.dispatch.claims import claim_attempts
from qinglong.control.dispatch.completion import finish_completion
from qinglong.control.dispatch.config import DispatchConfig
from qinglong.control.dispatch.errors import DispatchError, LeaseLostError
from qinglong.control.dispatch.leases import heartbeat, lease_state, report_started
from qinglong.control.dispatch.log_upload import grant_log_upload
from qinglong.control.dispatch.workers import register_incarnation, stop_incarnation
from qinglong.shared import wire
from qinglong.shared.errors import ValidationError

W = TypeVar("W", bound=wire._Wire)
WorkerPrincipal = Annotated[Principal, Depends(require("worker"))]
WorkerToken = Annotated[str, Depends(bearer_token)]
router = APIRouter(prefix="/v1/worker", tags=["worker"])


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """``schema`` with every ``#/$defs/X`` reference replaced by X (the wire types are not
    recursive) and objects closed (``additionalProperties: false``, as ``from_json``)."""
    if isinstance(schema, list):
        return [_inline(item, defs) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _inline(defs[ref.removeprefix("#/$defs/")], defs)
    out = {k: _inline(v, defs) for k, v in schema.items() if k != "$defs"}
    if out.get("type") == "object" and "properties" in out:
        out["additionalProperties"] = False
    return out


def schema_of(kind: type[Any]) -> dict[str, Any]:
    """The self-contained JSON schema of a wire dataclass (pydantic's, references inlined)."""
    from pydantic import TypeAdapter

    raw = TypeAdapter(kind).json_schema()
    result: dict[str, Any] = _inline(raw, raw.get("$defs", {}))
    return result


def _doc(body: type[Any], answer: type[Any]) -> dict[str, Any]:
    """Route keywords that put ``body`` and ``answer`` into the OpenAPI document."""
    return {
        "openapi_extra": {"requestBody": {"required": True, "content": {
            "application/json": {"schema": schema_of(body)}}}},
        "responses": {200: {"content": {"application/json": {"schema": schema_of(answer)}}},
                      404: {"description": "bundle_not_found"},
                      409: {"description": "lease_lost, completion_conflict, log_mismatch, "
                                           "unknown_incarnation"},
                      403: {"description": "forbidden, labels_outside_pool"},
                      422: {"description": "invalid_request"}},
    }


async def _decode(request: Request, kind: type[W]) -> W:
    try:
        data = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError):
        raise ApiError(422, "invalid_request", "the body is not JSON") from None
    try:
        return kind.from_json(data)
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", f"invalid field: {exc.field}") from None


async def _decode_later(request: Request, kind: type[W]) -> W | ApiError:
    """``_decode``'s body, or its 422 to raise once the token is known good."""
    try:
        return await _decode(request, kind)
    except ApiError as exc:
        return exc


R = TypeVar("R")


def _in_step(ctx: ApiContext, token: str, body: W | ApiError,
             step: Callable[[InTransaction, Principal, W], R]) -> R:
    """Run ``step`` in one transaction that first reads ``token``'s row (401/403), then
    raises ``body``'s 422 if it is one. Blocking: call through ``_call``."""
    with ctx.engine.begin() as conn:
        principal = authorize(conn, token, "worker")
        if isinstance(body, ApiError):
            raise body
        return step(InTransaction(conn), principal, body)


def _config(ctx: ApiContext) -> DispatchConfig:
    config = ctx.extras.get("dispatch")
    if isinstance(config, DispatchConfig):
        return config
    return DispatchConfig(lease_ms=ctx.lease_ms, heartbeat_ms=ctx.heartbeat_ms)


async def _call(ctx: ApiContext, fn: Callable[[], Any]) -> dict[str, Any]:
    """Run a blocking dispatch step off the event loop; map its typed errors (a fenced write,
    409 ``lease_lost``, is counted as a lease lost with reason ``fenced``)."""
    try:
        answer = await run_in_threadpool(fn)
    except DispatchError as exc:
        if exc.code == LeaseLostError.code and ctx.metrics is not None:
            ctx.metrics.lease_lost("fenced")
        raise ApiError(exc.status, exc.code, str(exc)) from None
    except ValidationError as exc:
        raise ApiError(422, "invalid_request", f"invalid field: {exc.field}") from None
    result: dict[str, Any] = answer.to_json()
    return result


def _wire_version(request: Request) -> int:
    """The worker's ``QL3-Wire`` header as an int (1 when absent or not a small number)."""
    value = request.headers.get(wire.WIRE_HEADER, "").strip()
    return int(value) if value.isdigit() and len(value) < 4 else 1


def _pool(principal: Principal) -> str:
    if principal.pool_id is None:  # a worker token always names a pool (schema CHECK)
        raise ApiError(403, "forbidden", "this token has no worker pool")
    return principal.pool_id


@router.post("/register", **_doc(wire.WorkerRegistration, wire.WorkerRegistered))
async def register(request: Request, token: WorkerToken) -> dict[str, Any]:
    """A worker process start: a new incarnation (403 ``labels_outside_pool``)."""
    body = await _decode_later(request, wire.WorkerRegistration)
    ctx = get_context(request)
    return await _call(ctx, lambda: _in_step(ctx, token, body, lambda tx, who, b: (
        register_incarnation(tx, _config(ctx), pool_id=_pool(who),
                             pool_labels=who.pool_labels or {}, registration=b))))


def claim_wait_s(request: Request, config: DispatchConfig) -> float:
    """How long an empty claim may wait for work (docs/protocols.md §4.2 "Claims that
    wait"), in seconds: 0 unless the worker sends ``QL3-Wire: 2`` or later and
    ``QL3-Claim-Wait: <ms>`` (a decimal of at most 7 digits); else min(that, 25 s,
    lease/3). An older worker, which sends no wait, keeps its immediate answer."""
    if _wire_version(request) < 2:
        return 0.0
    value = request.headers.get(wire.CLAIM_WAIT_HEADER, "").strip()
    if not value.isdigit() or len(value) > 7:
        return 0.0
    return min(int(value), wire.CLAIM_WAIT_MAX_MS, config.lease_ms // 3) / 1000.0


def _next_due_in_s(ctx: ApiContext) -> float | None:
    from qinglong.control.db.engine import run_named
    from qinglong.control.dispatch.statements import sql

    with ctx.engine.connect() as conn:
        value = run_named(conn, sql("next_due_in")).scalar()
    return None if value is None else max(0.0, float(value))


@router.post("/claim", **_doc(wire.ClaimRequest, wire.ClaimAnswer))
async def claim(request: Request, response: Response, token: WorkerToken) -> dict[str, Any]:
    """Lease up to ``max_attempts`` queued attempts (409 ``unknown_incarnation``); each
    attempt's ``secret_names`` only to a worker that sends ``QL3-Wire: 2``.

    A worker that also sends ``QL3-Claim-Wait`` (``claim_wait_s``) is answered when work
    was leased or the wait is over: an empty claim waits on this replica's claim wake-ups
    (a NOTIFY on ``ql3_claimable`` from any replica when a run is made, requeued, or may
    free a ``replace`` successor; livelog/wakeups.py) and until the earliest queued run's
    ``not_before``, then claims again; each claim moves the incarnation's
    ``last_seen_at``. Such an answer names the wait allowed in ``QL3-Claim-Wait``. A
    draining replica answers at once, without the header."""
    from qinglong.control.livelog.hub import hub_of
    from qinglong.control.livelog.wakeups import CLAIMABLE

    body = await _decode_later(request, wire.ClaimRequest)
    ctx = get_context(request)
    config = _config(ctx)
    hub = hub_of(ctx.extras)
    wait_s = 0.0 if hub.draining.is_set() else claim_wait_s(request, config)
    event = hub.wakeups.register(CLAIMABLE) if wait_s > 0 else None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    metrics = ctx.metrics
    if event is not None and metrics is not None:
        metrics.claim_waiting(+1)
    try:
        while True:
            answer = await _call(ctx, lambda: _in_step(ctx, token, body, lambda tx, who, b: (
                claim_attempts(tx, config, pool_id=_pool(who), request=b,
                               keyring=ctx.extras.get("keyring")))))
            if answer["attempts"] or event is None or hub.draining.is_set():
                break
            left = deadline - loop.time()
            if left <= 0:
                break
            due_in = await run_in_threadpool(_next_due_in_s, ctx)
            sleep_s = left if due_in is None else min(left, due_in + 0.01)
            try:
                await asyncio.wait_for(event.wait(), sleep_s)
                ended = "woken"
            except TimeoutError:
                ended = "timer"
            event.clear()
            if hub.draining.is_set():
                ended = "draining"
            if metrics is not None:
                metrics.claim_wait_slept(ended)
            if ended == "draining":
                break
    finally:
        if event is not None:
            hub.wakeups.unregister(CLAIMABLE, event)
            if metrics is not None:
                metrics.claim_waiting(-1)
    if wait_s > 0 and not hub.draining.is_set():
        response.headers[wire.CLAIM_WAIT_HEADER] = str(round(wait_s * 1000))
    if _wire_version(request) < wire.WIRE_VERSION:
        for item in answer["attempts"]:  # an older worker's strict decoder refuses the field
            item.pop("secret_names", None)
    if ctx.metrics is not None:
        ctx.metrics.claimed(len(answer["attempts"]))
    return answer


@router.post("/started", **_doc(wire.StartedReport, wire.Ack))
async def started(request: Request, token: WorkerToken) -> dict[str, Any]:
    """The attempt's process runs; a replay answers ``replayed: true``."""
    body = await _decode_later(request, wire.StartedReport)
    ctx = get_context(request)
    return await _call(ctx, lambda: _in_step(ctx, token, body, lambda tx, who, b: (
        report_started(tx, _config(ctx), pool_id=_pool(who), report=b))))


@router.post("/heartbeat", **_doc(wire.HeartbeatReport, wire.HeartbeatAnswer))
async def beat(request: Request, token: WorkerToken) -> dict[str, Any]:
    """Renew the lease; the answer carries ``cancel``."""
    body = await _decode_later(request, wire.HeartbeatReport)
    ctx = get_context(request)
    return await _call(ctx, lambda: _in_step(ctx, token, body, lambda tx, who, b: (
        heartbeat(tx, _config(ctx), pool_id=_pool(who), report=b))))


@router.post("/log-upload", **_doc(wire.LogUploadRequest, wire.LogUploadGrant))
async def log_upload(request: Request, token: WorkerToken) -> dict[str, Any]:
    """A presigned PUT for the attempt's log (503 ``log_store_unavailable`` without a
    bucket)."""
    body = await _decode_later(request, wire.LogUploadRequest)
    ctx = get_context(request)
    return await _call(ctx, lambda: _in_step(ctx, token, body, lambda tx, who, b: (
        grant_log_upload(tx, _config(ctx), s3=ctx.s3, bucket=ctx.bucket, pool_id=_pool(who),
                         request=b))))


@router.post("/bundle", **_doc(wire.BundleRequest, wire.BundleGrant))
async def bundle(request: Request, token: WorkerToken) -> dict[str, Any]:
    """A presigned GET of the script bundle the leased attempt runs (404
    ``bundle_not_found``; 503 ``log_store_unavailable`` without a bucket)."""
    body = await _decode_later(request, wire.BundleRequest)
    ctx = get_context(request)
    return await _call(ctx, lambda: _in_step(ctx, token, body, lambda tx, who, b: (
        grant_bundle_fetch(tx, _config(ctx), s3=ctx.s3, bucket=ctx.bucket,
                           pool_id=_pool(who), request=b))))


@router.post("/log-chunk", **_doc(wire.LogChunkBatch, wire.LogChunkAnswer))
async def log_chunk(request: Request, principal: WorkerPrincipal) -> dict[str, Any]:
    """Append live log chunks (docs/protocols.md §4.9): per-chunk status 200 / 409 / 416 in
    the answer (HTTP 200 for the request as a whole); ``flush_ms`` asks chatty workers to
    slow down when this replica's byte budget is spent."""
    from qinglong.control.livelog.append import append_batch
    from qinglong.control.livelog.hub import hub_of

    body = await _decode(request, wire.LogChunkBatch)
    ctx = get_context(request)
    hub = hub_of(ctx.extras)
    outcome = await run_in_threadpool(lambda: append_batch(
        ctx.engine, pool_id=_pool(principal), batch=body, gate=hub.gate, budget=hub.budget))
    for attempt_id in outcome.stored:
        hub.wakeups.wake(attempt_id)  # this replica's followers need no round trip
    if ctx.metrics is not None:
        for result in outcome.answer.results:
            if result.status == 409:
                ctx.metrics.lease_lost("fenced")
    for attempt_id, end in outcome.deferred.items():
        hub.defer_notify(ctx.engine, attempt_id, end)
    answer: dict[str, Any] = outcome.answer.to_json()
    return answer


@router.post("/complete", **_doc(wire.CompletionReport, wire.Ack))
async def complete(request: Request, token: WorkerToken) -> dict[str, Any]:
    """The attempt ended; a replay answers ``replayed: true`` (409 ``log_mismatch``)."""
    return await _completion(request, token, no_output=False)


@router.post("/complete-no-output", **_doc(wire.CompletionReport, wire.Ack))
async def complete_no_output(request: Request, token: WorkerToken) -> dict[str, Any]:
    """The attempt ended and its output was empty: no log was put (``log`` and ``layout``
    null, else 422; 409 ``log_mismatch`` when live chunks were stored for it), so there is
    nothing to HEAD; recorded as ``no_output`` (``dispatch/completion.py``). Sent only by a
    worker with ``QL3-Wire: 2``; a replica without this route answers 404 and that worker
    completes through ``/complete`` as before (docs/protocols.md §4.2)."""
    return await _completion(request, token, no_output=True)


async def _completion(request: Request, token: WorkerToken, *,
                      no_output: bool) -> dict[str, Any]:
    """One completion step for ``/complete`` and ``/complete-no-output`` (``finish_completion``
    in one transaction); a first ``log_unavailable`` completion is counted in the metrics."""
    parsed = await _decode_later(request, wire.CompletionReport)
    ctx = get_context(request)

    def step() -> wire.Ack:
        pool_id, state, report = _in_step(ctx, token, parsed, lambda tx, who, b: (
            _pool(who), lease_state(tx.conn, _pool(who), b.lease), b))
        return finish_completion(ctx.engine, state, s3=ctx.s3, bucket=ctx.bucket,
                                 pool_id=pool_id, report=report, no_output=no_output)

    answer: dict[str, Any] = await _call(ctx, step)
    assert not isinstance(parsed, ApiError)  # _in_step raised it
    if (parsed.reason == "log_unavailable" and ctx.metrics is not None
            and not answer.get("replayed")):
        ctx.metrics.log_unavailable()
    return answer


@router.post("/stopped", **_doc(wire.WorkerStopped, wire.Ack))
async def stopped(request: Request, token: WorkerToken) -> dict[str, Any]:
    """The incarnation finished draining (idempotent)."""
    body = await _decode_later(request, wire.WorkerStopped)
    ctx = get_context(request)

    def stop(tx: InTransaction, who: Principal, b: wire.WorkerStopped) -> wire.Ack:
        stop_incarnation(tx, pool_id=_pool(who), incarnation_id=b.incarnation_id)
        return wire.Ack()

    return await _call(ctx, lambda: _in_step(ctx, token, body, stop))
