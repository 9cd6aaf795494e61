"""Byte-exact reads of an attempt's log by raw offset (docs/protocols.md §4.4 "Raw read",
§4.9 "Offsets and gaps").

The log of an attempt lives in one of three places, chosen in one REPEATABLE READ snapshot
of its attempt row, its artifact and its chunk rows (so a completion, which deletes the rows
and records the artifact in one transaction, is seen entirely or not at all):

- a verified artifact: served from S3 by ranged GETs (the exact VersionId, else
  ``If-Match: <etag>``) after a validated HEAD; ``run_attempt_log_artifacts.layout`` maps raw
  offsets onto the object (raw ``[0, head)`` is object ``[0, head)``; raw
  ``[head, tail_offset)`` is the gap the cap left out; raw ``[tail_offset, raw_bytes)`` follows
  the marker line);
- chunk rows (running, or an ended attempt without a verified artifact: a partial log);
- an attempt completed without output (``no_output`` in its completion,
  ``dispatch/completion.py``): an empty, complete log that is not partial;
- nothing: retired (tombstone, or the partial-log marker ``log_rows_retired_at``: 410) or no
  log (404).

``read_raw`` never holds a pooled connection across an S3 call or a wait.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from qinglong.control.db.engine import run_named
from qinglong.control.livelog.statements import sql
from qinglong.control.retention.objects import (
    ArtifactIdentity,
    ArtifactUnavailableError,
    S3ObjectStore,
)
from qinglong.control.retention.store_common import http_status
from qinglong.shared.errors import QinglongError

if TYPE_CHECKING:
    from sqlalchemy import Engine

MAX_ANSWER_BYTES = 1024 * 1024
LIVE = frozenset({"claimed", "starting", "running"})


class LogGoneError(QinglongError):
    """No log to serve: ``kind`` ``not_found`` (no attempt, or it left no log), ``retired``
    (a partial log dropped by the sweep: ``retired_at``, ``outcome`` ``deleted``),
    ``tombstone`` (retention retired the stored log: the caller verifies the tombstone
    through ``retention/read_path.py``), or ``unavailable`` (the store cannot answer)."""

    code = "log_not_found"

    def __init__(self, kind: str, reason: str, *, retired_at: datetime | None = None,
                 outcome: str | None = None) -> None:
        super().__init__(reason)
        self.kind, self.retired_at, self.outcome = kind, retired_at, outcome


@dataclass(frozen=True)
class RawSlice:
    """One answer of the raw read. ``offset``: raw offset of ``body[0]`` (≥ the asked
    offset); ``gap``: bytes between the asked offset and ``offset`` that cannot be served
    (left out by a cap, not streamed, dropped from the live window); ``next`` = ``offset +
    len(body)``; ``end``: the log's end as known now; ``status``: the attempt's status;
    ``complete``: the attempt is terminal and ``next`` is its log's end; ``partial``: the
    log is chunk rows of an ended attempt (lost, not_started, not stored: may be
    incomplete); ``final``: status, exit code, signal, reason and duration (seconds)."""

    offset: int
    gap: int
    next: int
    end: int
    body: bytes
    status: str
    complete: bool
    partial: bool
    final: dict[str, Any]


def _final(row: Any) -> dict[str, Any]:
    duration = row["duration_s"]
    return {"status": row["status"], "exit_code": row["exit_code"], "signal": row["signal"],
            "reason": row["reason"],
            "duration_s": None if duration is None else round(float(duration), 3)}


def read_raw(engine: Engine, s3: Any, attempt_id: str, *, offset: int | None = None,
             tail: int | None = None, limit: int = MAX_ANSWER_BYTES,
             empty_ok: bool = True) -> RawSlice:
    """The bytes of ``attempt_id``'s log from the first available raw offset ≥ ``offset``
    (or ≥ end − ``tail``; 0 when both are None), at most ``limit`` bytes. An ended attempt
    that left neither a stored log nor chunk rows answers an empty, complete, partial slice
    (so a follower ends with its status), or ``not_found`` without ``empty_ok``.

    Raises LogGoneError (``not_found`` / ``retired`` / ``unavailable``),
    ArtifactIntegrityMismatchError (the object differs from its record: fail closed).
    A tombstone is not verified here: the caller routes ``retired`` through the verified
    read path (``retention/read_path.py``)."""
    with engine.connect() as plain:
        conn = plain.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            row = run_named(conn, sql("read_state"), {"attempt_id": attempt_id}
                            ).mappings().first()
            if row is None:
                raise LogGoneError("not_found", "no attempt has this id")
            if row["tb_retired_at"] is not None:
                raise LogGoneError("tombstone", "retired by retention",
                                   retired_at=row["tb_retired_at"], outcome=row["tb_outcome"])
            if row["artifact_id"] is None:
                return _from_rows(conn, row, attempt_id, offset, tail, limit, empty_ok)
    return _from_object(s3, row, attempt_id, offset, tail, limit)


def _from_rows(conn: Any, row: Any, attempt_id: str, offset: int | None, tail: int | None,
               limit: int, empty_ok: bool) -> RawSlice:
    status = str(row["status"])
    if row["no_output"] and status not in LIVE:  # recorded empty: nothing was put
        asked = offset or 0
        return RawSlice(offset=asked, gap=0, next=asked, end=0, body=b"", status=status,
                        complete=True, partial=False, final=_final(row))
    if row["log_rows_retired_at"] is not None:
        raise LogGoneError("retired", "the partial log was retired by retention",
                           retired_at=row["log_rows_retired_at"], outcome="deleted")
    end = int(row["log_end"])
    partial = status not in LIVE
    if partial and not row["log_rows"] and not (empty_ok and end == 0):
        raise LogGoneError("not_found", "no log was recorded for this attempt")
    asked = max(0, end - tail) if tail is not None else (offset or 0)
    pos, first, body = asked, None, bytearray()
    for _round in range(8):  # gap rows may push past what one query fetched
        if pos >= end or len(body) >= limit:
            break
        rows = run_named(conn, sql("read_rows"), {
            "attempt_id": attempt_id, "from": pos, "to": pos + limit - len(body)}
            ).mappings().all()
        for r in rows:
            start, stop = int(r["start_offset"]), int(r["end_offset"])
            if stop <= pos:
                continue
            if r["gap"] or start > pos:
                if first is not None:
                    break  # the body stays contiguous; the next read reports the gap
                pos = stop if r["gap"] else start
                if r["gap"]:
                    continue
            take = bytes(r["data"])[pos - start:pos - start + limit - len(body)]
            first = pos if first is None else first
            body += take
            pos += len(take)
            if len(body) >= limit:
                break
        if first is not None or not rows:
            break
    if first is None:
        first = asked if asked >= end else min(pos, end)
    nxt = first + len(body)
    return RawSlice(offset=first, gap=max(0, first - asked), next=nxt, end=end,
                    body=bytes(body), status=status, complete=partial and nxt >= end,
                    partial=partial, final=_final(row))


def _layout(row: Any) -> tuple[int, int, int, int]:
    """(raw_bytes, head_bytes, tail_offset, marker_len) of the artifact."""
    size = int(row["size_bytes"])
    layout = row["layout"]
    if isinstance(layout, str):
        layout = json.loads(layout)
    if not layout:
        return size, size, size, 0
    raw, head, tail_at = int(layout["raw_bytes"]), int(layout["head_bytes"]), \
        int(layout["tail_offset"])
    return raw, head, tail_at, size - head - (raw - tail_at)


def _from_object(s3: Any, row: Any, attempt_id: str, offset: int | None, tail: int | None,
                 limit: int) -> RawSlice:
    raw, head, tail_at, marker = _layout(row)
    asked = max(0, raw - tail) if tail is not None else (offset or 0)
    first = asked
    if head <= first < tail_at:
        first = tail_at  # the middle the cap left out
    if first >= raw:
        first = max(asked, raw)
        return RawSlice(offset=first, gap=first - asked, next=first, end=raw, body=b"",
                        status=str(row["status"]), complete=True, partial=False,
                        final=_final(row))
    if first < head:
        obj_start, count = first, min(limit, head - first)
    else:
        obj_start, count = head + marker + (first - tail_at), min(limit, raw - first)
    body = _ranged_get(s3, row, attempt_id, obj_start, count) if count > 0 else b""
    nxt = first + len(body)
    return RawSlice(offset=first, gap=first - asked, next=nxt, end=raw, body=body,
                    status=str(row["status"]), complete=nxt >= raw, partial=False,
                    final=_final(row))


def _ranged_get(s3: Any, row: Any, attempt_id: str, start: int, count: int) -> bytes:
    if s3 is None:
        raise LogGoneError("unavailable", "no log store is configured")
    identity = ArtifactIdentity(
        bucket=row["bucket"], key=row["object_key"], version_id=row["version_id"],
        content_type=row["content_type"], size=int(row["size_bytes"]), sha256=row["sha256"],
        metadata={"project": str(row["project_id"]), "run": str(row["run_id"]),
                  "attempt": attempt_id, "artifact": row["artifact_id"]})
    store = S3ObjectStore(s3, in_transaction=lambda: False)
    try:
        head = store.head(identity)
    except ArtifactUnavailableError as exc:
        raise LogGoneError("unavailable", f"log store unavailable: {exc.reason}") from None
    if head.state == "absent":
        raise LogGoneError("unavailable", "log object missing")
    kwargs: dict[str, Any] = {"Bucket": identity.bucket, "Key": identity.key,
                              "Range": f"bytes={start}-{start + count - 1}"}
    if identity.version_id is not None:
        kwargs["VersionId"] = identity.version_id
    elif head.etag:
        kwargs["IfMatch"] = head.etag
    try:
        body: bytes = s3.get_object(**kwargs)["Body"].read()
    except ClientError as exc:
        raise LogGoneError("unavailable", f"GET answered {http_status(exc)}") from None
    except BotoCoreError as exc:
        raise LogGoneError("unavailable", f"GET failed: {type(exc).__name__}") from None
    return body[:count]
