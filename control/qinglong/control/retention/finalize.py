"""Steps 4–5 of a sweep: finalize a retired artifact, or record why it could not be retired.

Finalize is a second short transaction (ADR-0379 §3 step 5; docs/protocols.md §4.3 step 4): lock the
claimed control by primary key with a plain ``FOR UPDATE`` (never SKIP LOCKED), re-verify
owner, token, version, lease expiry, terminal statuses and identity, then in one statement
delete the control (fenced by version and by the lease at that statement's clock, since the
lock wait may outlive it) and insert the tombstone. Named statements of ``queries.sql`` on
the SQLAlchemy connection (``db/engine.py``: BEGIN, lock, retire, COMMIT). Any mismatch
raises FenceMismatchError and changes nothing (the transaction rolls back): the next
claimant settles the artifact from S3 facts.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from json.encoder import encode_basestring_ascii
from typing import TYPE_CHECKING, NamedTuple

from qinglong.control.db.engine import run_named
from qinglong.control.errors import FenceMismatchError
from qinglong.control.retention.claims import Claim, queries
from qinglong.shared.backoff import retry_delay_s
from qinglong.shared.digest import sha256_hex
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Connection

EVIDENCE_SCHEMA = "qinglong/run-attempt-log-retirement@v1"
_TERMINAL_OK = frozenset({"succeeded", "failed", "cancelled", "timed_out"})  # terminal, not lost
RETRY_BASE_S = 60.0
RETRY_CAP_S = 86_400.0  # ADR-0379 §4: at most 24 h, capped before exponentiation
MANUAL_AFTER_DEFAULT = 8


class Outcome(StrEnum):
    """How the object left the store: we deleted it, or HEAD found it already gone."""

    DELETED = "deleted"
    ALREADY_ABSENT = "already_absent"


class FailureClass(StrEnum):
    """Persisted failure classes: the ADR's three and ours, ``object_store_unsafe``."""

    ARTIFACT_UNAVAILABLE = "artifact_unavailable"
    ARTIFACT_INTEGRITY_MISMATCH = "artifact_integrity_mismatch"
    RETIREMENT_RECORD_UNAVAILABLE = "retirement_record_unavailable"
    OBJECT_STORE_UNSAFE = "object_store_unsafe"


@dataclass(frozen=True, slots=True)
class Tombstone:
    """Immutable retirement evidence: canonical JSON ``evidence`` and its hex SHA-256."""

    attempt_id: str
    artifact_id: str
    outcome: Outcome
    retired_at: datetime
    evidence: str
    evidence_sha256: str


@dataclass(frozen=True, slots=True)
class FailureRecorded:
    """The control after a failure: ``state`` pending or manual, next ``due_at`` (db time)."""

    state: str
    failure_count: int
    due_at: datetime


# Canonical JSON encoder, built once (``json.dumps`` with options builds one per call).
_EVIDENCE_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
# The same document as one format string: its keys in sorted order, each value the JSON text
# the encoder above would write (strings through its own escaper, ``encode_basestring_ascii``).
# A finalize builds one per row, and this path costs about a third of the encoder's.
_EVIDENCE_FORMAT = (
    '{"artifact_id":%s,"attempt_id":%s,"bucket":%s,"content_type":%s,"object_key":%s,'
    '"outcome":%s,"project_id":%s,"retired_at":%s,"retired_by":%s,"run_id":%s,'
    '"schema":' + encode_basestring_ascii(EVIDENCE_SCHEMA) + ',"sha256":%s,"size_bytes":%d,'
    '"version_id":%s}')


def canonical_evidence(claim: Claim, outcome: Outcome, retired_at: datetime) -> str:
    """The ``qinglong/run-attempt-log-retirement@v1`` document: sorted keys, no spaces, ASCII
    (exactly ``json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)``).
    """
    stamp = retired_at.astimezone(UTC).isoformat(timespec="microseconds")
    if type(claim.size_bytes) is int:  # exactly int: a bool or float has JSON of its own
        quote = encode_basestring_ascii
        try:
            return _EVIDENCE_FORMAT % (
                quote(claim.artifact_id), quote(claim.attempt_id), quote(claim.bucket),
                quote(claim.content_type), quote(claim.object_key), quote(outcome.value),
                quote(claim.project_id), quote(stamp), quote(claim.owner),
                quote(claim.run_id), quote(claim.sha256), claim.size_bytes,
                "null" if claim.version_id is None else quote(claim.version_id))
        except TypeError:  # a field that is not a str: the encoder decides its JSON
            pass
    doc = {
        "schema": EVIDENCE_SCHEMA,
        "project_id": claim.project_id,
        "run_id": claim.run_id,
        "attempt_id": claim.attempt_id,
        "artifact_id": claim.artifact_id,
        "bucket": claim.bucket,
        "object_key": claim.object_key,
        "version_id": claim.version_id,
        "size_bytes": claim.size_bytes,
        "sha256": claim.sha256,
        "content_type": claim.content_type,
        "outcome": outcome.value,
        "retired_at": stamp,
        "retired_by": claim.owner,
    }
    return _EVIDENCE_JSON.encode(doc)


class _Locked(NamedTuple):
    """One ``lock_control`` row; the fields are its select list, in order (checked once)."""

    db_now: datetime
    project_id: str  # ids and token as text (``::text`` in the statement)
    run_id: str
    state: str
    claim_owner: str | None
    claim_token: str | None
    claim_version: int
    lease_expires_at: datetime | None
    run_status: str | None
    attempt_status: str | None
    la_id: str | None
    la_bucket: str | None
    la_object_key: str | None
    la_version_id: str | None
    la_size_bytes: int | None
    la_sha256: str | None
    la_content_type: str | None


_LOCK_COLUMNS_CHECKED: list[bool] = []  # non-empty once this process matched the select list


def _check_lock_columns(names: tuple[str, ...]) -> None:
    """RuntimeError unless ``lock_control`` returns exactly ``_Locked``'s fields, in order."""
    if names != _Locked._fields:
        raise RuntimeError(f"lock_control returns {names}, finalize expects {_Locked._fields}")
    _LOCK_COLUMNS_CHECKED.append(True)


def _fence_problem(row: _Locked, claim: Claim) -> str | None:
    """Why the locked row no longer belongs to ``claim`` (None: the fence holds)."""
    if row.state != "pending":
        return f"state is {row.state}"
    if (row.claim_owner, row.claim_token, row.claim_version) != (
        claim.owner, claim.token, claim.version
    ):
        return "owner, token or version changed"
    if row.lease_expires_at is None or row.lease_expires_at <= row.db_now:
        return "lease expired"
    if row.run_status not in _TERMINAL_OK or row.attempt_status not in _TERMINAL_OK:
        return "run or attempt is not terminal (or lost)"
    recorded = (row.la_id, row.la_bucket, row.la_object_key, row.la_version_id,
                row.la_size_bytes, row.la_sha256, row.la_content_type)
    claimed = (claim.artifact_id, claim.bucket, claim.object_key, claim.version_id,
               claim.size_bytes, claim.sha256, claim.content_type)
    if recorded != claimed or (row.project_id, row.run_id) != (
        claim.project_id, claim.run_id
    ):
        return "artifact identity changed"
    return None


def finalize(conn: Connection, claim: Claim, outcome: Outcome) -> Tombstone:
    """Tombstone ``claim``'s artifact and delete its control in one short transaction that
    it opens and commits on ``conn`` (an idle SQLAlchemy Connection).

    Call only after S3 confirmed the delete or HEAD found the object absent. Returns the
    tombstone written (``retired_at`` database time, evidence canonical JSON and its hex
    SHA-256). Raises FenceMismatchError (nothing written) when the fence no longer holds;
    database errors (``sqlalchemy.exc.DBAPIError``) pass through, nothing written.
    """
    with conn.begin():
        # ADR-0379 §3 step 5: plain FOR UPDATE by primary key, never SKIP LOCKED
        locked = run_named(conn, queries()["lock_control"], {"attempt_id": claim.attempt_id})
        if not _LOCK_COLUMNS_CHECKED:
            _check_lock_columns(tuple(locked.keys()))
        first = locked.first()
        if first is None:
            raise FenceMismatchError(f"control {claim.attempt_id} is gone")
        row = _Locked._make(first)
        problem = _fence_problem(row, claim)
        if problem is not None:
            raise FenceMismatchError(f"control {claim.attempt_id}: {problem}")
        retired_at: datetime = row.db_now
        evidence = canonical_evidence(claim, outcome, retired_at)
        digest = sha256_hex(evidence.encode("ascii"))
        # ADR-0379 §3 step 5: delete the control and insert the exact tombstone in one
        # statement, committed with this transaction
        retired = run_named(conn, queries()["retire_control"], {
            "attempt_id": claim.attempt_id, "claim_version": claim.version,
            "project_id": claim.project_id, "run_id": claim.run_id,
            "artifact_id": claim.artifact_id, "outcome": outcome.value,
            "retired_at": retired_at, "evidence": evidence, "evidence_sha256": digest,
        })
        if retired.rowcount != 1:  # the lease ran out while this transaction waited: the
            # statement changed nothing; the rollback only releases the row lock
            raise FenceMismatchError(f"control {claim.attempt_id}: lease expired")
    return Tombstone(claim.attempt_id, claim.artifact_id, outcome, retired_at, evidence, digest)


def record_failure(
    conn: Connection,
    claim: Claim,
    failure_class: FailureClass,
    *,
    manual_after: int = MANUAL_AFTER_DEFAULT,
    retry_base_s: float = RETRY_BASE_S,
    rng: random.Random | None = None,
) -> FailureRecorded | None:
    """Release ``claim`` with a failure class and a jittered, capped retry time.

    The delay is ``retry_delay_s(failures, base retry_base_s (default 60 s), cap 86,400 s)``:
    full jitter, capped at 24 h before exponentiation (ADR-0379 §4). After ``manual_after``
    failures the control moves to ``manual``. Fenced by owner, token and version: returns
    None (nothing changed) when another claim superseded this one. One transaction, opened
    and committed on ``conn`` (an idle SQLAlchemy Connection). Raises ValidationError
    when ``manual_after`` < 1 or ``retry_base_s`` is outside 0 < base ≤ 86,400 s.
    """
    if manual_after < 1:
        raise ValidationError("manual_after", "must be at least 1")
    if not 0 < retry_base_s <= RETRY_CAP_S:
        raise ValidationError("retry_base_s", f"{retry_base_s} s outside (0, {RETRY_CAP_S:g}] s")
    delay_s = retry_delay_s(claim.failure_count + 1, base_s=retry_base_s, cap_s=RETRY_CAP_S,
                            rng=rng)
    params = {
        "attempt_id": claim.attempt_id, "claim_version": claim.version,
        "claim_token": claim.token, "claim_owner": claim.owner,
        "failure_class": FailureClass(failure_class).value,
        "manual_after": manual_after, "delay_s": delay_s,
    }
    with conn.begin():
        row = run_named(conn, queries()["record_failure"], params).first()
    return None if row is None else FailureRecorded(row[0], row[1], row[2])
