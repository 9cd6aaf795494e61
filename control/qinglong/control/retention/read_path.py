"""Reading an attempt's log against retention (ADR-0379 §5; docs/protocols.md §4.4).

Order: tombstone first (retired → 410 with the retirement time and outcome); otherwise read
the recorded object from S3 (200 with its bytes); if S3 says missing, check the tombstone again
(retired meanwhile → 410) and otherwise answer 503 (unavailable, retry later) — never a fake
"retired". A tombstone whose evidence digest, schema or identity does not match its row and the
recorded artifact raises TombstoneIntegrityError (fail closed). The HTTP endpoint maps
``LogReadResult.status`` one to one.

No pooled connection is held across an S3 call: ``ConnectionGate`` counts the connections the
calling thread holds from the SQLAlchemy engine (``db/engine.py``), and ``S3LogReader``
refuses S3 work while it is non-zero.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from qinglong.control.db.engine import run_named
from qinglong.control.retention.claims import queries
from qinglong.control.retention.finalize import EVIDENCE_SCHEMA
from qinglong.control.retention.objects import (
    ArtifactIdentity,
    ArtifactIntegrityMismatchError,
    ArtifactUnavailableError,
    ObjectStoreUnsafeError,
    S3ObjectStore,
)
from qinglong.control.retention.store_common import http_status
from qinglong.shared.errors import QinglongError
from qinglong.shared.ids import validate_uuid7

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from sqlalchemy import Connection, Engine


class TombstoneIntegrityError(QinglongError):
    """A tombstone's evidence does not hash to its digest or names another identity."""

    code = "tombstone_integrity_mismatch"


@dataclass(frozen=True, slots=True)
class LogReadResult:
    """``status`` 200 (``body`` holds the bytes), 404 (no log recorded), 410 (retired:
    ``retired_at`` database time, ``outcome`` deleted/already_absent) or 503 (missing without a
    tombstone, or the store is unreachable: retry later). ``reason`` is a short text."""

    status: Literal[200, 404, 410, 503]
    reason: str
    body: bytes | None = None
    retired_at: datetime | None = None
    outcome: str | None = None


class LogObjectReader(Protocol):
    """Validated GET: the recorded bytes, or None when the object is absent (404)."""

    def get(self, identity: ArtifactIdentity) -> bytes | None:
        """Raises ArtifactUnavailableError or ArtifactIntegrityMismatchError."""


class ConnectionGate:
    """Wraps an SQLAlchemy ``engine`` and knows whether the calling thread holds one of its
    connections."""

    def __init__(self, engine: Engine) -> None:
        self._engine, self._local = engine, threading.local()

    def held(self) -> bool:
        """True while the calling thread is inside ``connection()``."""
        return int(getattr(self._local, "held", 0)) > 0

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A pooled connection of the engine (idle, not in a transaction), counted while it
        is held; returned to the pool on exit."""
        with self._engine.connect() as conn:
            self._local.held = int(getattr(self._local, "held", 0)) + 1
            try:
                yield conn
            finally:
                self._local.held -= 1


class S3LogReader:
    """``LogObjectReader`` over boto3: validated HEAD (``S3ObjectStore.head``), then GET of the
    exact VersionId (versioned) or with ``If-Match: <etag>`` (unversioned); the body's length
    and SHA-256 must equal the record. 412 (changed during the read), network and 5xx raise
    ArtifactUnavailableError; a body that differs raises ArtifactIntegrityMismatchError."""

    def __init__(self, client: S3Client, *, in_transaction: Callable[[], bool]) -> None:
        self._client = client
        self._store = S3ObjectStore(client, in_transaction=in_transaction)

    def get(self, identity: ArtifactIdentity) -> bytes | None:
        """The recorded object's bytes, or None when absent. # ADR-0379 §5"""
        head = self._store.head(identity)
        if head.state == "absent":
            return None
        kwargs: dict[str, Any] = {"Bucket": identity.bucket, "Key": identity.key}
        if identity.version_id is not None:
            kwargs["VersionId"] = identity.version_id
        elif head.etag:
            kwargs["IfMatch"] = head.etag
        self._store.guard()
        try:
            body = self._client.get_object(**kwargs)["Body"].read()
        except ClientError as exc:
            status = http_status(exc)
            if status == 404:
                return None
            raise ArtifactUnavailableError(f"GET answered {status}") from exc
        except BotoCoreError as exc:
            raise ArtifactUnavailableError(f"GET failed: {type(exc).__name__}") from exc
        if len(body) != identity.size or hashlib.sha256(body).hexdigest() != identity.sha256:
            raise ArtifactIntegrityMismatchError("GET: body differs from the record")
        return body


def _state(gate: ConnectionGate, attempt_id: str) -> dict[str, Any] | None:
    with gate.connection() as conn, conn.begin():
        row = run_named(conn, queries()["read_log_state"], {"attempt_id": attempt_id}
                        ).mappings().first()
    return None if row is None else dict(row)


def verify_tombstone(attempt_id: str, row: dict[str, Any]) -> None:
    """Raise TombstoneIntegrityError unless the evidence hashes to its digest and names exactly
    this attempt, the tombstone's columns and the recorded artifact. # ADR-0379 §5"""
    evidence: str = row["tb_evidence"]
    if hashlib.sha256(evidence.encode("utf-8")).hexdigest() != row["tb_evidence_sha256"]:
        raise TombstoneIntegrityError(f"tombstone {attempt_id}: evidence digest mismatch")
    try:
        doc = json.loads(evidence)
    except ValueError as exc:
        raise TombstoneIntegrityError(f"tombstone {attempt_id}: evidence is not JSON") from exc
    retired: datetime = row["tb_retired_at"]
    expected = {
        "schema": EVIDENCE_SCHEMA, "attempt_id": attempt_id,
        "project_id": str(row["project_id"]), "run_id": str(row["run_id"]),
        "artifact_id": row["artifact_id"], "bucket": row["bucket"],
        "object_key": row["object_key"], "version_id": row["version_id"],
        "size_bytes": row["size_bytes"], "sha256": row["sha256"],
        "content_type": row["content_type"], "outcome": row["tb_outcome"],
        "retired_at": retired.astimezone(UTC).isoformat(timespec="microseconds"),
    }
    columns = (str(row["tb_attempt_id"]), str(row["tb_project_id"]), str(row["tb_run_id"]),
               row["tb_artifact_id"])
    if columns != (attempt_id, expected["project_id"], expected["run_id"],
                   expected["artifact_id"]):
        raise TombstoneIntegrityError(f"tombstone {attempt_id}: identity columns differ")
    if not isinstance(doc, dict):
        raise TombstoneIntegrityError(f"tombstone {attempt_id}: evidence is not an object")
    for name, value in expected.items():
        if doc.get(name) != value:
            raise TombstoneIntegrityError(f"tombstone {attempt_id}: evidence {name} differs")
    by = doc.get("retired_by")
    if set(doc) != {*expected, "retired_by"} or not isinstance(by, str) or not by:
        raise TombstoneIntegrityError(f"tombstone {attempt_id}: evidence fields differ")
    if json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True) != evidence:
        raise TombstoneIntegrityError(f"tombstone {attempt_id}: evidence is not canonical")


def _retired(attempt_id: str, row: dict[str, Any]) -> LogReadResult:
    verify_tombstone(attempt_id, row)
    return LogReadResult(410, "retired", retired_at=row["tb_retired_at"],
                         outcome=row["tb_outcome"])


def read_attempt_log(gate: ConnectionGate, store: LogObjectReader,
                     attempt_id: str) -> LogReadResult:
    """The log of ``attempt_id`` (a UUIDv7) as 200/404/410/503 (docs/protocols.md §4.4).

    Raises TombstoneIntegrityError (tampered tombstone), ArtifactIntegrityMismatchError (the
    stored bytes are not the recorded artifact), InvalidIdentifierError (bad id); database
    errors (``sqlalchemy.exc.DBAPIError``) pass through. The S3 call runs with no
    connection held (``gate``).
    """
    attempt_id = validate_uuid7(attempt_id)
    row = _state(gate, attempt_id)  # ADR-0379 §5: tombstone before S3
    if row is None:
        return LogReadResult(404, "no log recorded for this attempt")
    if row["tb_evidence"] is not None:
        return _retired(attempt_id, row)
    identity = ArtifactIdentity(
        bucket=row["bucket"], key=row["object_key"], version_id=row["version_id"],
        content_type=row["content_type"], size=row["size_bytes"], sha256=row["sha256"],
        metadata={"project": str(row["project_id"]), "run": str(row["run_id"]),
                  "attempt": attempt_id, "artifact": row["artifact_id"]})
    try:
        body = store.get(identity)
    except ArtifactUnavailableError as exc:
        return LogReadResult(503, f"log store unavailable: {exc.reason}")
    except ObjectStoreUnsafeError as exc:  # e.g. a delete marker hides the recorded object
        return LogReadResult(503, f"log object hidden: {exc.reason}")
    if body is not None:
        return LogReadResult(200, "ok", body=body)
    again = _state(gate, attempt_id)  # ADR-0379 §5: missing → check the tombstone again
    if again is not None and again["tb_evidence"] is not None:
        return _retired(attempt_id, again)
    return LogReadResult(503, "log object missing and not retired; retry later")
