"""Completion of a leased attempt (docs/protocols.md §4.2 fencing and logs, §4.3 enrollment).

1. Read the lease. A replay of a completion already applied on this lease (same content)
   answers ``Ack(replayed=True)``; other content on that lease is CompletionConflictError;
   a lease that is not live is LeaseLostError. Nothing changes in either refusal.
2. When the worker claims a log: HEAD the object with control's own S3 client, outside any
   transaction, and require the claimed size, content type, identity metadata and SHA-256
   (``retention/objects.py`` checks); any difference or absence is LogMismatchError.
3. One transaction: compare-and-set the attempt to its terminal status (completion JSON kept
   for replays), record the artifact with the VersionId S3 reported (ETag and VersionId also
   in the completion JSON), then either queue the run again with capped jittered backoff by
   database time (failed / timed out, attempts left, no cancel, task not removed — both
   read fresh under the run's lock, ``run_fate``) or finish it with the
   attempt's status and enroll its logs for retention (``enroll_run``); events for both.
   With a verified artifact, the same transaction records the reported ``LogLayout`` (how
   raw offsets map onto a capped object) and deletes the attempt's live chunk rows
   (docs/protocols.md §4.9); without one, the rows stay as the attempt's partial log.

**No output** (``no_output=True``, route ``/v1/worker/complete-no-output``, a worker sending
``QL3-Wire: 2``; docs/protocols.md §4.2 "Completion and the worker's log"): the attempt's
output was empty, so the worker asked no upload grant and put no object. The report names no
log and no layout (else ValidationError), control does no HEAD, refuses it when live chunks
were stored for the attempt (its output was not empty: LogMismatchError), and records
``"no_output": true`` in the completion JSON and the ``attempt_completed`` event's detail:
no artifact row, so retention has nothing to enroll and the orphan sweep nothing to HEAD;
reads answer an empty, complete log (``livelog/read.py``).
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.dispatch.errors import (
    CompletionConflictError,
    LeaseLostError,
    LogMismatchError,
    LogStoreUnavailableError,
)
from qinglong.control.dispatch.leases import lease_params, lease_state
from qinglong.control.dispatch.log_upload import log_identity
from qinglong.control.dispatch.statements import insert_event, sql
from qinglong.control.livelog.statements import sql as live_sql
from qinglong.control.retention.enrollment import enroll_run
from qinglong.control.retention.objects import (
    ArtifactIdentity,
    ArtifactIntegrityMismatchError,
    HeadResult,
    ObjectStoreError,
    S3ObjectStore,
)
from qinglong.shared.backoff import retry_delay_s
from qinglong.shared.errors import ValidationError
from qinglong.shared.wire import Ack, CompletionReport

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine
    from sqlalchemy.engine import RowMapping

_COMPLETED = ("succeeded", "failed", "timed_out", "cancelled")
_RETRYABLE = ("failed", "timed_out")


class _RacedError(Exception):
    """The compare-and-set found no live lease: decided after the rollback."""


LOG_UNAVAILABLE = "log_unavailable"  # a worker's reason: its log could not be stored


def complete_attempt(engine: Engine, *, s3: Any, bucket: str | None, pool_id: str,
                     report: CompletionReport, rng: random.Random | None = None,
                     no_output: bool = False) -> Ack:
    """Apply ``report`` to its leased attempt, all-or-nothing; ``Ack()`` when applied now,
    ``Ack(replayed=True)`` for a replay of the applied completion.

    Raises LeaseLostError (not live: recovered, re-claimed, expired by the database clock,
    another pool's), CompletionConflictError (already completed differently), LogMismatchError
    (HEAD differs from the claim or finds nothing), LogStoreUnavailableError (no bucket, or
    S3 could not answer). ``rng`` draws the retry jitter (tests pin it). A report with
    reason ``log_unavailable`` (the worker could not store the log; its live chunks are its
    partial log) also writes an ``attempt_log_unavailable`` event. ``no_output``: the
    module docstring's "No output".
    """
    with engine.begin() as conn:
        state = lease_state(conn, pool_id, report.lease)
    return finish_completion(engine, state, s3=s3, bucket=bucket, pool_id=pool_id,
                             report=report, rng=rng, no_output=no_output)


def finish_completion(engine: Engine, state: RowMapping | None, *, s3: Any,
                      bucket: str | None, pool_id: str, report: CompletionReport,
                      rng: random.Random | None = None, no_output: bool = False) -> Ack:
    """``complete_attempt`` after step 1: ``state`` is ``lease_state`` of the report's
    lease, read by the caller in a transaction it has committed (e.g. the request's own,
    after its token read), so the HEAD runs outside any transaction. Same answers and
    errors as ``complete_attempt``."""
    if no_output and (report.log is not None or report.layout is not None):
        raise ValidationError("log", "a completion without output names no log")
    replay = _replay_answer(state, report, no_output)
    if replay is not None:
        return replay
    assert state is not None
    ident: ArtifactIdentity | None = None
    head: HeadResult | None = None
    if no_output and int(state.get("log_end") or 0) > 0:
        raise LogMismatchError("output was streamed live: not a completion without output")
    if report.log is not None:
        if s3 is None or not bucket:
            raise LogStoreUnavailableError("no log bucket is configured")
        ident = log_identity(bucket=bucket, project_id=state["project_id"],
                             run_id=state["run_id"], attempt_id=state["attempt_id"],
                             facts=report.log)
        head = _verify_log(s3, ident)
    try:
        with engine.begin() as conn:
            _apply(conn, state, pool_id, report, ident, head, rng, no_output)
    except _RacedError:
        with engine.begin() as conn:
            state = lease_state(conn, pool_id, report.lease)
        replay = _replay_answer(state, report, no_output)
        if replay is not None:
            return replay
        raise LeaseLostError("the lease is not live") from None
    return Ack()


def _replay_answer(state: RowMapping | None, report: CompletionReport,
                   no_output: bool = False) -> Ack | None:
    """None while the lease is live; the replay's answer, or the refusal, otherwise (a
    replay matches the applied report and whether it said "no output")."""
    if state is None:
        raise LeaseLostError("the lease is not live")
    if state["status"] in _COMPLETED and state["completion"] is not None:
        applied = state["completion"]
        if (applied.get("report") == report.to_json()
                and bool(applied.get("no_output")) == no_output):
            return Ack(replayed=True)
        raise CompletionConflictError("this lease was already completed differently")
    if state["status"] not in ("claimed", "starting", "running") or not state["live"]:
        raise LeaseLostError("the lease is not live")
    return None


def _verify_log(s3: Any, ident: ArtifactIdentity) -> HeadResult:
    """HEAD with control's own client (no transaction is open here: ADR-0379 §3)."""
    store = S3ObjectStore(s3, in_transaction=lambda: False)
    try:
        head = store.head(ident)
    except ArtifactIntegrityMismatchError as exc:
        raise LogMismatchError(exc.reason) from None
    except ObjectStoreError as exc:
        raise LogStoreUnavailableError(f"the log store could not be read: {exc.reason}") \
            from None
    if head.state != "present":
        raise LogMismatchError("object absent")
    return head


def _layout_json(report: CompletionReport, size: int) -> str | None:
    """The reported LogLayout as JSON, when it fits the verified object: its marker (object
    size − head − tail) is not negative. A layout that cannot describe the object raises
    LogMismatchError (nothing is recorded)."""
    layout = report.layout
    if layout is None:
        return None
    if size - layout.head_bytes - (layout.raw_bytes - layout.tail_offset) < 0:
        raise LogMismatchError("layout does not fit the object")
    return json.dumps(layout.to_json(), sort_keys=True)


def _apply(conn: Connection, state: RowMapping, pool_id: str, report: CompletionReport,
           ident: ArtifactIdentity | None, head: HeadResult | None,
           rng: random.Random | None, no_output: bool = False) -> None:
    outcome = report.outcome
    fate = run_named(conn, sql("run_fate"), {"run_id": state["run_id"]}).mappings().one()
    if fate["cancel"] and outcome in _RETRYABLE:
        outcome = "cancelled"  # the worker stopped it because a cancel was requested
    version_id = head.version_id if head and head.version_id not in (None, "", "null") else None
    completion: dict[str, Any] = {
        "report": report.to_json(),
        "object": None if head is None else {"etag": head.etag, "version_id": version_id}}
    if no_output:
        completion["no_output"] = True
    row = run_named(conn, sql("complete_attempt"), lease_params(
        pool_id, report.lease, status=outcome, exit_code=report.exit_code,
        signal=report.signal, reason=report.reason,
        completion=json.dumps(completion))).first()
    if row is None:
        raise _RacedError()
    attempt_id, run_id = state["attempt_id"], state["run_id"]
    detail: dict[str, Any] = {"reason": report.reason} if report.reason else {}
    if no_output:
        detail["no_output"] = True
    insert_event(conn, run_id=run_id, attempt_id=attempt_id, kind="attempt_completed",
                 from_status=str(row[0]), to_status=outcome, detail=detail or None)
    if report.reason == LOG_UNAVAILABLE:  # its log could not be stored: say so on its own
        insert_event(conn, run_id=run_id, attempt_id=attempt_id, kind="attempt_log_unavailable",
                     from_status=outcome, to_status=outcome, detail={"reason": report.reason})
    if ident is not None:
        run_named(conn, sql("insert_log_artifact"), {
            "id": ident.metadata["artifact"], "attempt_id": attempt_id,
            "project_id": state["project_id"], "run_id": run_id, "bucket": ident.bucket,
            "object_key": ident.key, "version_id": version_id, "size_bytes": ident.size,
            "sha256": ident.sha256, "content_type": ident.content_type,
            "metadata": json.dumps(dict(ident.metadata), sort_keys=True),
            "etag": head.etag if head is not None else None,
            "layout": _layout_json(report, ident.size)})
        # §4.9: the live rows go only with a verified artifact, in this same transaction
        run_named(conn, live_sql("delete_chunks"), {"attempt_id": attempt_id})
    retry = (outcome in _RETRYABLE and not fate["cancel"] and not fate["task_deleted"]
             and int(state["number"]) < int(state["max_attempts"]))
    if retry:
        delay_s = retry_delay_s(int(state["number"]),
                                base_s=state["retry_backoff_ms"] / 1000.0,
                                cap_s=state["retry_backoff_cap_ms"] / 1000.0, rng=rng)
        moved = run_named(conn, sql("requeue_run"),
                          {"run_id": run_id, "delay_s": delay_s}).mappings().first()
    else:
        moved = run_named(conn, sql("finish_run"), {
            "run_id": run_id, "status": outcome, "exit_code": report.exit_code}).mappings().first()
    if moved is None:  # the run left dispatching/running without its attempt: fail closed
        raise _RacedError()
    insert_event(conn, run_id=run_id, attempt_id=attempt_id,
                 kind="run_requeued" if retry else "run_finished",
                 from_status=moved["from_status"], to_status=moved["to_status"])
    if retry or state.get("concurrency_policy") == "replace":
        # claimable now or at its not_before; an ended run may free its replace successor
        run_named(conn, sql("notify_claimable"))
    if not retry:
        # ADR-0379 §2: enrolled in the terminal transition's own transaction
        enroll_run(conn, str(run_id))
