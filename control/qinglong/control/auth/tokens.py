"""API tokens: random 256-bit values stored only as SHA-256 hashes (docs/protocols.md §4.5).

A token reads ``ql3_<43 url-safe base64 characters>`` (32 random bytes); the database keeps
``sha256(token)`` in hex, so a dump of ``api_tokens`` grants nothing. Scopes nest:
``viewer`` ⊂ ``operator`` ⊂ ``admin``; ``worker`` is apart (worker endpoints only, bounded
by its pool's labels). Lookups compare hashes through the unique index (a timing side channel
on the index reveals nothing about a token that is not already its hash).

Validity: a token authenticates while ``revoked_at IS NULL OR revoked_at > now()`` by the
database clock. A revocation in the future is *pending*: ``ensure_token`` schedules one when
a rotated Secret replaces a token with an overlap, so the workers holding the old token go
on until they have switched to the new one. The name belongs to the token with no
revocation at all (``revoked_at IS NULL``): a pending one has handed it to its successor.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7

if TYPE_CHECKING:
    from sqlalchemy import Connection

SCOPES = ("viewer", "operator", "admin", "worker")
_RANK = {"viewer": 1, "operator": 2, "admin": 3}
_TOKEN = re.compile(r"^ql3_[A-Za-z0-9_-]{43}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the token's id and name, its scope, and for a worker token its
    pool (id, name, labels). Never holds the token itself."""

    token_id: str
    name: str
    scope: str
    pool_id: str | None = None
    pool_name: str | None = None
    pool_labels: dict[str, str] | None = None

    def allows(self, needed: str) -> bool:
        """True when this principal's scope includes ``needed`` (viewer/operator/admin);
        a worker token includes only ``worker``."""
        if needed == "worker" or self.scope == "worker":
            return self.scope == needed
        return _RANK[self.scope] >= _RANK[needed]


def new_token() -> str:
    """A fresh token: ``ql3_`` + 32 random bytes, url-safe base64 without padding."""
    return "ql3_" + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """Hex SHA-256 of ``token``'s UTF-8 bytes (what ``api_tokens.token_sha256`` stores)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def looks_like_token(token: str) -> bool:
    """True when ``token`` has the shape ``new_token`` produces (checked before hashing, so
    junk never reaches the database)."""
    return bool(_TOKEN.match(token))


def check_scope(scope: str) -> str:
    if scope not in SCOPES:
        raise ValidationError("--scope", f"must be one of {', '.join(SCOPES)}")
    return scope


def check_hash(digest: str) -> str:
    if not _HEX64.match(digest):
        raise ValidationError("--sha256", "must be 64 lowercase hex digits")
    return digest


_LOOKUP = """
SELECT t.id::text, t.name, t.scope, p.id::text AS pool_id, p.name AS pool_name,
       p.labels AS pool_labels
FROM api_tokens t LEFT JOIN worker_pools p ON p.id = t.pool_id
WHERE t.token_sha256 = %(sha)s AND (t.revoked_at IS NULL OR t.revoked_at > now())
"""


def authenticate(conn: Connection, token: str) -> Principal | None:
    """The principal of a valid ``token`` (never revoked, or its revocation still pending),
    or None (unknown, revoked or malformed: the caller answers 401 alike). One indexed
    read; no write."""
    if not looks_like_token(token):
        return None
    row = conn.exec_driver_sql(_LOOKUP, {"sha": token_hash(token)}).mappings().first()
    if row is None:
        return None
    return Principal(row["id"], row["name"], row["scope"], row["pool_id"], row["pool_name"],
                     dict(row["pool_labels"]) if row["pool_labels"] is not None else None)


def insert_token(conn: Connection, *, name: str, scope: str, sha256: str,
                 pool_id: str | None) -> str:
    """Record a token by its hash inside the caller's transaction; returns the new token id.
    ValidationError for a bad scope, hash, or a worker token without a pool (or the reverse);
    TokenNameTakenError when a live token has ``name`` (a revoked one frees it, and so does
    a pending revocation: the name went to the token that replaced it). Concurrent
    inserts of one name are serialized by a transaction-scoped advisory lock on the name, so
    two never both pass the check. A duplicate hash raises the driver's UniqueViolation."""
    from qinglong.control.errors import TokenNameTakenError

    check_scope(scope)
    check_hash(sha256)
    if (scope == "worker") != (pool_id is not None):
        raise ValidationError("--pool", "a worker token needs a pool; other scopes take none")
    if not 1 <= len(name) <= 100:
        raise ValidationError("--name", "must be 1–100 characters")
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtextextended("
                         "'ql3.api_tokens.name:' || %(name)s, 0))", {"name": name})
    taken = conn.exec_driver_sql(
        "SELECT 1 FROM api_tokens WHERE name = %(name)s AND revoked_at IS NULL",
        {"name": name}).first()
    if taken is not None:
        raise TokenNameTakenError("--name", "a live token already has this name; revoke it "
                                            "first or choose another name")
    token_id = uuid7()
    conn.exec_driver_sql(
        "INSERT INTO api_tokens (id, name, token_sha256, scope, pool_id)"
        " VALUES (%(id)s, %(name)s, %(sha)s, %(scope)s, %(pool)s)",
        {"id": token_id, "name": name, "sha": sha256, "scope": scope, "pool": pool_id})
    return token_id


def ensure_token(conn: Connection, *, name: str, scope: str, sha256: str,
                 pool_id: str | None, overlap_s: int = 0) -> tuple[str, str]:
    """Make the live token named ``name`` the one whose hash is ``sha256``, with ``scope`` and
    ``pool_id``, inside the caller's transaction; returns (token id, outcome).

    Outcomes: ``unchanged`` (a live token of this name already has this hash, scope and
    pool: nothing is written, so a hook that runs at every upgrade is idempotent),
    ``replaced`` (the live token of this name differs, e.g. its Secret was rotated: its
    revocation is set to ``now() + overlap_s`` seconds by the database clock — at once with
    the default 0, else it stays valid until then, so its holders can switch — and this one
    recorded, both in this transaction) or ``created``. "Live" here is the token holding the
    name (no revocation, not even a pending one). Raises what ``insert_token`` raises;
    ValidationError (``--overlap``) for a negative or oversized overlap; a hash already
    recorded under another name, or revoked (pending or not), raises the driver's
    UniqueViolation (a revoked token is never revived).
    """
    check_scope(scope)
    check_hash(sha256)
    check_overlap(overlap_s)
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtextextended("
                         "'ql3.api_tokens.name:' || %(name)s, 0))", {"name": name})
    live = conn.exec_driver_sql(
        "SELECT id::text, token_sha256, scope, pool_id::text FROM api_tokens"
        " WHERE name = %(name)s AND revoked_at IS NULL", {"name": name}).first()
    if live is not None and (live[1], live[2], live[3]) == (sha256, scope, pool_id):
        return str(live[0]), "unchanged"
    if live is not None:
        conn.exec_driver_sql(
            "UPDATE api_tokens SET revoked_at = now() + make_interval(secs => %(s)s)"
            " WHERE id = %(id)s AND revoked_at IS NULL", {"id": live[0], "s": overlap_s})
    token_id = insert_token(conn, name=name, scope=scope, sha256=sha256, pool_id=pool_id)
    return token_id, "created" if live is None else "replaced"


MAX_OVERLAP_S = 30 * 24 * 3600


def check_overlap(overlap_s: int) -> int:
    """``overlap_s`` when it is a whole number of seconds in 0–30 days; ValidationError
    naming ``--overlap`` otherwise."""
    if isinstance(overlap_s, bool) or not isinstance(overlap_s, int) \
            or not 0 <= overlap_s <= MAX_OVERLAP_S:
        raise ValidationError("--overlap", f"must be whole seconds, 0–{MAX_OVERLAP_S}")
    return overlap_s


def revoke_token(conn: Connection, token_id: str) -> bool:
    """Revoke token ``token_id`` now (its next request is refused), also one whose revocation
    was pending; False when unknown or already revoked."""
    result = conn.exec_driver_sql(
        "UPDATE api_tokens SET revoked_at = now() WHERE id = %(id)s"
        " AND (revoked_at IS NULL OR revoked_at > now())", {"id": token_id})
    return bool(result.rowcount)


def list_tokens(conn: Connection) -> list[dict[str, Any]]:
    """Every token's id, name, scope, pool name, created and revoked times (never a hash),
    and ``revocation_pending``: its revocation time is still ahead (it authenticates until
    then)."""
    rows = conn.exec_driver_sql(
        "SELECT t.id::text AS id, t.name, t.scope, p.name AS pool, t.created_at,"
        " t.revoked_at, coalesce(t.revoked_at > now(), false) AS revocation_pending"
        " FROM api_tokens t LEFT JOIN worker_pools p ON p.id = t.pool_id"
        " ORDER BY t.created_at, t.id").mappings().all()
    return [dict(r) for r in rows]
