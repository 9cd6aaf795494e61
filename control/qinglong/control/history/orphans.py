"""Orphan log objects: collect what a worker PUT for an attempt that never recorded it
(docs/operations.md "Orphan log objects").

A worker uploads its log to the key derived from the attempt (``p/<project>/wlog-<attempt>``,
``dispatch/log_upload.py``) before it completes. When it loses its lease in between (SIGKILL,
a refused late completion), no artifact row names the object and ADR-0379 never retires it.
``sweep_orphans`` walks remote attempts that ended more than ``margin_s`` ago (past the lease
and the presigned URL's lifetime: no upload of theirs can still arrive; ``orphan_margin_s``
derives it from the dispatch configuration) from a cursor, under a
lease on the ``orphan_sweep_jobs`` row (one sweeper at a time; a crashed one's lease ends).
For each attempt that no artifact row names, that did not complete without output (a
``no_output`` completion: the worker asked no grant and put nothing, ``dispatch/completion.py``)
and that has no evidence yet it HEADs the key and
deletes exactly what it saw, under retention's conditional rules (``S3ObjectStore.delete``:
the VersionId seen, or ``If-Match`` on the ETag seen; a 412 means the object changed after
the HEAD, such as a concurrent re-upload, and is kept; a lost DELETE answer is healed by the
404-then-HEAD path). Every attempt looked at gets one row of ``orphan_log_objects``, never a
tombstone. No database transaction is open during an S3 call.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from qinglong.control.db.engine import run_named
from qinglong.control.history.prune import queries
from qinglong.control.retention.objects import (
    META_PREFIX,
    ArtifactIdentity,
    ArtifactIntegrityMismatchError,
    ArtifactUnavailableError,
    S3ObjectStore,
)
from qinglong.control.retention.store_common import http_status
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from qinglong.control.dispatch.config import DispatchConfig

MARGIN_S_FLOOR = 3600.0
CLOCK_SLACK_S = 300.0  # the store's clock and the database's may disagree this much
LEASE_S = 120.0
LIMIT_MAX = 100


@dataclass
class OrphanSweep:
    """One sweep: ``leased`` False when another sweeper held the job; ``walked`` attempts read
    from the cursor; ``outcomes``: evidence rows written by outcome; ``stopped``: why the sweep
    ended early (the object store was unavailable) or None."""

    leased: bool
    walked: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    stopped: str | None = None


def _object_key(project_id: str, attempt_id: str) -> str:
    return f"p/{project_id}/wlog-{attempt_id}"


def orphan_margin_s(dispatch: DispatchConfig) -> float:
    """Seconds after an attempt ended before its log key may be swept (docs/operations.md
    §12 "Orphan log objects"): a worker can hold a presigned log PUT issued while its lease
    was still alive, valid ``upload_url_ttl_s`` seconds from then, so the margin is that
    lifetime plus the lease plus :data:`CLOCK_SLACK_S`, and never below
    :data:`MARGIN_S_FLOOR` (one hour)."""
    return max(MARGIN_S_FLOOR,
               dispatch.upload_url_ttl_s + dispatch.lease_ms / 1000 + CLOCK_SLACK_S)


def sweep_orphans(engine: Engine, store: S3ObjectStore, client: Any, bucket: str, owner: str,
                  *, margin_s: float, limit: int = 50) -> OrphanSweep:
    """Look at up to ``limit`` (1..100) ended attempts and collect their orphan objects.

    ``store`` deletes (its probe verdict decides unversioned deletes), ``client`` is the boto3
    client it wraps (for the unvalidated HEAD), ``owner`` a process incarnation
    (``retention.claims.process_owner``). ``margin_s`` seconds after an attempt ended (at
    least its lease plus the upload URL's lifetime: :func:`orphan_margin_s`; tests pass less).
    An unavailable store stops the sweep; the
    cursor stays before the attempt it could not settle. ValidationError on bad bounds.
    """
    if not 1 <= limit <= LIMIT_MAX:
        raise ValidationError("limit", f"{limit} outside 1..{LIMIT_MAX}")
    q = queries()
    with engine.begin() as conn:
        lease = run_named(conn, q["orphan_lease"], {"owner": owner, "lease_s": LEASE_S}).first()
        if lease is None:
            return OrphanSweep(leased=False)
        run_named(conn, q["orphan_walk_plan"])
        walked = run_named(conn, q["orphan_walk"], {
            "limit": limit, "margin_s": float(margin_s), "cursor_finished_at": lease[0],
            "cursor_attempt_id": lease[1]}).all()
    result = OrphanSweep(leased=True, walked=len(walked))
    cursor: tuple[datetime | str, str] = (lease[0], lease[1])  # text: '-infinity'
    evidence: list[dict[str, Any]] = []
    for attempt_id, finished_at, project_id, run_id, orphan in walked:
        if orphan:
            try:
                row = _collect(store, client, bucket, project_id, run_id, attempt_id)
            except ArtifactUnavailableError as exc:
                result.stopped = str(exc)
                break
            evidence.append({**row, "attempt_id": attempt_id, "project_id": project_id,
                             "run_id": run_id, "bucket": bucket, "owner": owner})
        cursor = (finished_at, attempt_id)
    with engine.begin() as conn:
        for row in evidence:
            if run_named(conn, q["orphan_record"], row).rowcount:
                result.outcomes[row["outcome"]] += 1
        run_named(conn, q["orphan_release"], {
            "owner": owner, "cursor_finished_at": cursor[0], "cursor_attempt_id": cursor[1]})
    return result


def _collect(store: S3ObjectStore, client: Any, bucket: str, project_id: str, run_id: str,
             attempt_id: str) -> dict[str, Any]:
    """HEAD the attempt's key and delete exactly the object seen; the evidence fields."""
    key = _object_key(project_id, attempt_id)
    store.guard()
    try:
        resp = client.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if http_status(exc) == 404:
            try:
                client.head_bucket(Bucket=bucket)  # a missing bucket is not "nothing uploaded"
            except (ClientError, BotoCoreError) as bucket_exc:
                raise ArtifactUnavailableError("HeadBucket failed") from bucket_exc
            return _row(key, "absent")
        raise ArtifactUnavailableError(f"HEAD answered {http_status(exc)}") from exc
    except BotoCoreError as exc:
        raise ArtifactUnavailableError(f"HEAD failed: {type(exc).__name__}") from exc
    meta = {str(k).lower(): str(v) for k, v in (resp.get("Metadata") or {}).items()}
    etag, version = resp.get("ETag"), resp.get("VersionId")
    version = version if isinstance(version, str) and version != "null" else None
    size = int(resp.get("ContentLength", 0))
    prefix = META_PREFIX.removeprefix("x-amz-meta-")
    if meta.get(prefix + "attempt") != attempt_id:
        return _row(key, "foreign", etag, version, size)
    try:
        ident = ArtifactIdentity(
            bucket=bucket, key=key, version_id=version,
            content_type=str(resp.get("ContentType") or "application/octet-stream"),
            size=size, sha256=meta.get(prefix + "sha256", ""),
            metadata={"project": meta.get(prefix + "project", ""),
                      "run": meta.get(prefix + "run", ""), "attempt": attempt_id,
                      "artifact": meta.get(prefix + "artifact", "")})
    except ValidationError:
        return _row(key, "foreign", etag, version, size)
    try:
        done = store.delete(ident, etag if isinstance(etag, str) else None)
    except ArtifactIntegrityMismatchError:
        return _row(key, "changed", etag, version, size)  # 412: never delete what changed
    return _row(key, done.outcome, etag, version, size)


def _row(key: str, outcome: str, etag: Any = None, version: str | None = None,
         size: int | None = None) -> dict[str, Any]:
    return {"object_key": key, "outcome": outcome,
            "etag": etag if isinstance(etag, str) else None, "version_id": version,
            "size_bytes": size}
