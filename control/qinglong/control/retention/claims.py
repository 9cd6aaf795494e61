"""Step 1 of a sweep: claim due retention controls under a database-clock lease (ADR-0379 §2).

A claim is one short READ COMMITTED transaction: ``FOR UPDATE SKIP LOCKED`` inside a
``MATERIALIZED`` CTE (a plain ``IN (subquery LIMIT n)`` can claim more than n rows under a nested
loop, docs/protocols.md §4.3), then an update that re-checks state, due time, lease expiry and
immutable identity and bumps the version. A row whose identity broke moves to ``manual`` with
``artifact_integrity_mismatch`` instead of being leased; a row whose retention is not over by
today's facts (``finished_at`` + the task's current ``log_retention_s``: the policy may have been
raised since enrollment) moves to its new eligibility instead. The claim's work does not grow
with the table, with or without planner statistics: ``claim_plan`` pins its plan in the same
transaction and the identity check reaches each picked row's artifact, attempt, run and task
by key (docs/protocols.md §4.3, "Bounded without statistics";
``integration/control/test_control_claim_work.py``). The caller returns the connection to
the pool, and only then talks to S3. Statements are the named blocks of ``queries.sql``, run through
the SQLAlchemy engine's driver level (``db/engine.py``).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qinglong.control.db.engine import run_named
from qinglong.control.db.queries import load_queries
from qinglong.shared.errors import ValidationError

if TYPE_CHECKING:
    from sqlalchemy import Connection

MAX_CLAIM_LIMIT = 16  # ADR-0379 §4: at most 16 rows per claim
MIN_LEASE_S = 5.0  # ADR-0379 §4: lease 5 s – 5 min
MAX_LEASE_S = 300.0


_QUERIES_DIR = str(Path(__file__).parent)  # computed once: a Path per call cost ~6 µs


def queries() -> dict[str, Any]:
    """The named statements of ``retention/queries.sql`` (read once per process)."""
    return load_queries(_QUERIES_DIR, "queries.sql")


@dataclass(frozen=True, slots=True)
class ClaimOwner:
    """A process incarnation: ``replica_id`` plus a random id chosen at process start.

    Never a reusable pod name alone (docs/protocols.md §4.2): a restarted pod with the same name is
    a different owner, so it cannot finalize its predecessor's claims.
    """

    replica_id: str
    incarnation: str

    def __str__(self) -> str:
        return f"{self.replica_id}/{self.incarnation}"


_INCARNATION: dict[int, str] = {}


def process_owner(replica_id: str) -> ClaimOwner:
    """The owner of this process: one random 128-bit incarnation per pid (fork-safe)."""
    if (not replica_id or "/" in replica_id or len(replica_id) > 200
            or not replica_id.isprintable() or any(ch.isspace() for ch in replica_id)):
        raise ValidationError("replica_id", "must be 1..200 printable characters without "
                                            "spaces or '/'")
    incarnation = _INCARNATION.setdefault(os.getpid(), secrets.token_hex(16))
    return ClaimOwner(replica_id, incarnation)


@dataclass(frozen=True, slots=True)
class Claim:
    """One leased control: the exact artifact identity to retire and the fence to finalize it.

    ``version_id`` is the S3 VersionId the upload returned (None: unversioned bucket);
    ``size_bytes`` in bytes; ``sha256`` lowercase hex; ``lease_expires_at`` by database time.
    """

    attempt_id: str
    project_id: str
    run_id: str
    artifact_id: str
    bucket: str
    object_key: str
    version_id: str | None
    size_bytes: int
    sha256: str
    content_type: str
    owner: str
    token: str
    version: int
    lease_expires_at: datetime
    failure_count: int


def validate_bounds(limit: int, lease_s: float) -> None:
    """ValidationError unless 1 ≤ limit ≤ 16 and 5 s ≤ lease ≤ 300 s (ADR-0379 §4)."""
    if not 1 <= limit <= MAX_CLAIM_LIMIT:
        raise ValidationError("limit", f"{limit} outside 1..{MAX_CLAIM_LIMIT}")
    if not MIN_LEASE_S <= lease_s <= MAX_LEASE_S:
        raise ValidationError("lease_s", f"{lease_s} s outside {MIN_LEASE_S}..{MAX_LEASE_S} s")


def claim(
    conn: Connection, owner: ClaimOwner, *, limit: int, lease_s: float,
    versioned_only: bool = False,
) -> list[Claim]:
    """Lease at most ``limit`` due controls to ``owner`` for ``lease_s`` seconds.

    ``versioned_only``: claim only rows with a recorded VersionId (the sweeper sets it while
    the backend probe says ``unsafe``: unversioned rows would only fail towards ``manual``).

    Opens and commits its own transaction on ``conn`` (an SQLAlchemy Connection, idle: not
    in a transaction). Returns the intact claims (possibly fewer than the rows touched:
    broken identities go manual). Raises ValidationError on out-of-range bounds; database
    errors (``sqlalchemy.exc.DBAPIError``, e.g. a lock_timeout) pass through, nothing leased.
    """
    validate_bounds(limit, lease_s)
    params = {"limit": limit, "owner": str(owner), "lease_s": float(lease_s),
              "versioned_only": versioned_only}
    with conn.begin():  # ADR-0379 §2: one short READ COMMITTED transaction
        run_named(conn, queries()["claim_plan"])  # bounded without statistics (§4.3)
        rows = run_named(conn, queries()["claim"], params).all()
    # ids and token come back as text (``::text`` in the statement): no uuid.UUID round trip
    return [Claim(*r[1:]) for r in rows if r[0]]
