"""The cluster panel's sign-in and sessions in PostgreSQL (docs/panel.md "Cluster";
DESIGN §4.6; migration 0013).

A browser signs in with an API token of scope ``viewer``, ``operator`` or ``admin`` (a
``worker`` token is refused like a wrong one). The session id is 32 random bytes in the
``ql3_session`` cookie; the table keeps only its SHA-256 (``panel_sessions.id_sha256``), the
token's id and the CSRF token. Every lookup joins the token row, so a revoked token ends its
sessions at its next request. A session lives ``idle_s`` seconds after its last request (at
most ``absolute_s`` after sign-in), both by the database clock. A user may hold several
sessions (one per browser); signing out deletes one.

Every sign-in that is heard is logged in ``panel_signins`` (migration 0016): when, the
client address, success or not, and for a success the token's id and name (a failure names
no token; the text typed is never stored). The Settings page shows the newest; the sweep
forgets rows older than ``SIGNIN_LOG_KEEP_S``.

Failed sign-ins are throttled per client address, shared by every replica through
``panel_signin_failures``: after the n-th failure the address waits ``min(cap, 2**(n-1))``
seconds before any sign-in of it is heard (even a right token), a success clears the row.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qinglong.control.auth.tokens import authenticate
from qinglong.panel.security import Session, SignInRefusedError, SignInThrottledError
from qinglong.shared.ids import uuid7

if TYPE_CHECKING:
    from sqlalchemy import Engine

IDLE_S = 8 * 3600
ABSOLUTE_S = 7 * 24 * 3600
THROTTLE_CAP_S = 15 * 60
TOUCH_AFTER_S = 30  # last_seen_at moves at most this often (no write per static file)
SWEEP_AFTER_S = 24 * 3600  # a failure row this long past its wait is forgotten
SIGNIN_LOG_KEEP_S = 90 * 24 * 3600  # the sign-in log's rows live this long


def session_hash(session_id: str) -> str:
    """Hex SHA-256 of a session id (what ``panel_sessions.id_sha256`` stores)."""
    return hashlib.sha256(session_id.encode("utf-8")).hexdigest()


_BLOCKED = """
SELECT ceil(extract(epoch FROM blocked_until - now()))::int AS wait
FROM panel_signin_failures WHERE client = %(client)s AND blocked_until > now()
"""
_FAIL = """
INSERT INTO panel_signin_failures AS f (client, failures, last_failed_at, blocked_until)
VALUES (%(client)s, 1, now(), now() + interval '1 second')
ON CONFLICT (client) DO UPDATE SET failures = least(f.failures + 1, 64),
    last_failed_at = now(),
    blocked_until = now() + make_interval(secs => least(%(cap)s,
        power(2, least(f.failures, 30))::int))
"""
_LOG = """
INSERT INTO panel_signins (id, client, ok, token_id, token_name)
VALUES (%(id)s, %(client)s, %(ok)s, %(token)s, %(name)s)
"""
_CREATE = """
INSERT INTO panel_sessions (id_sha256, token_id, csrf, idle_expires_at, absolute_expires_at)
VALUES (%(sha)s, %(token)s, %(csrf)s, now() + make_interval(secs => %(idle)s),
        now() + make_interval(secs => %(absolute)s))
"""
_LOOKUP = """
WITH live AS (
    SELECT s.id_sha256, s.csrf, s.last_seen_at, s.created_at, t.name, t.scope
    FROM panel_sessions s JOIN api_tokens t ON t.id = s.token_id
    WHERE s.id_sha256 = %(sha)s AND s.idle_expires_at > now()
      AND s.absolute_expires_at > now()
      AND (t.revoked_at IS NULL OR t.revoked_at > now()) AND t.scope <> 'worker'
), touch AS (
    UPDATE panel_sessions p SET last_seen_at = now(),
        idle_expires_at = least(now() + make_interval(secs => %(idle)s), p.absolute_expires_at)
    FROM live WHERE p.id_sha256 = live.id_sha256
      AND live.last_seen_at < now() - make_interval(secs => %(touch)s)
    RETURNING 1
)
SELECT csrf, name, scope, extract(epoch FROM now() - created_at) FROM live
"""
_SWEEP = """
WITH gone AS (
    DELETE FROM panel_sessions s WHERE s.idle_expires_at <= now()
        OR s.absolute_expires_at <= now()
        OR EXISTS (SELECT 1 FROM api_tokens t WHERE t.id = s.token_id
                   AND t.revoked_at IS NOT NULL AND t.revoked_at <= now())
    RETURNING 1
), cleared AS (
    DELETE FROM panel_signin_failures
    WHERE blocked_until < now() - make_interval(secs => %(after)s) RETURNING 1
), forgotten AS (
    DELETE FROM panel_signins WHERE at < now() - make_interval(secs => %(keep)s) RETURNING 1
)
SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM cleared)
    + (SELECT count(*) FROM forgotten)
"""


@dataclass
class PanelSessionStore:
    """The panel's session store for the cluster (module docstring): ``engine`` the
    runtime role's pool; ``idle_s`` / ``absolute_s`` the expiries in seconds;
    ``throttle_cap_s`` the longest wait after failed sign-ins. Thread-safe (each call is
    one pooled connection); the panel calls it from worker threads."""

    engine: Engine
    idle_s: int = IDLE_S
    absolute_s: int = ABSOLUTE_S
    throttle_cap_s: int = THROTTLE_CAP_S

    #: the panel shows a token form at /signin (the local profile's link needs no form)
    token_sign_in = True

    def sign_in(self, token: str, client: str) -> Session:
        """A new session for ``token`` from address ``client`` (text, ≤ 64 characters).
        Raises SignInThrottledError while the address waits (checked first, so a right
        token does not pass either) and SignInRefusedError for a wrong or worker token,
        after recording the failure (its own committed transaction)."""
        client = (client or "unknown")[:64]
        with self.engine.begin() as conn:
            wait = conn.exec_driver_sql(_BLOCKED, {"client": client}).scalar()
            if wait is not None:
                raise SignInThrottledError(max(1, int(wait)))
            principal = authenticate(conn, token.strip())
            if principal is None or principal.scope == "worker":
                conn.exec_driver_sql(_FAIL, {"client": client, "cap": self.throttle_cap_s})
                conn.exec_driver_sql(_LOG, {"id": uuid7(), "client": client, "ok": False,
                                            "token": None, "name": None})
                failed = True
            else:
                failed = False
                conn.exec_driver_sql("DELETE FROM panel_signin_failures"
                                     " WHERE client = %(client)s", {"client": client})
                conn.exec_driver_sql(_LOG, {"id": uuid7(), "client": client, "ok": True,
                                            "token": principal.token_id,
                                            "name": principal.name[:100]})
                session_id, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
                conn.exec_driver_sql(_CREATE, {
                    "sha": session_hash(session_id), "token": principal.token_id,
                    "csrf": csrf, "idle": self.idle_s, "absolute": self.absolute_s})
        if failed or principal is None:
            raise SignInRefusedError
        return Session(session_id, csrf, can_write=principal.allows("operator"),
                       actor=principal.name, scope=principal.scope,
                       signed_in_at=time.monotonic())

    def get(self, session_id: str | None) -> Session | None:
        """The live session of a cookie value (its token valid, not expired), its idle
        expiry moved on; None otherwise. One statement."""
        if not session_id or len(session_id) > 128:
            return None
        with self.engine.begin() as conn:
            row = conn.exec_driver_sql(_LOOKUP, {
                "sha": session_hash(session_id), "idle": self.idle_s,
                "touch": TOUCH_AFTER_S}).first()
        if row is None:
            return None
        csrf, name, scope, age_s = row
        # the sign-in's age by the database's clock, as this process's monotonic time, so
        # the Variables page's "signed in within 15 minutes" holds on every replica
        return Session(session_id, str(csrf), can_write=scope in ("operator", "admin"),
                       actor=str(name), scope=str(scope),
                       signed_in_at=time.monotonic() - max(0.0, float(age_s)))

    def sign_out(self, session_id: str | None) -> None:
        """End one session (no error when it is unknown or already gone)."""
        if not session_id:
            return
        with self.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM panel_sessions WHERE id_sha256 = %(sha)s",
                                 {"sha": session_hash(session_id)})

    def sweep(self) -> int:
        """Delete expired sessions, those of revoked tokens, long-past sign-in failures and
        sign-in log rows older than ``SIGNIN_LOG_KEEP_S``; the number of rows deleted (a
        replica's periodic service)."""
        with self.engine.begin() as conn:
            swept = conn.exec_driver_sql(_SWEEP, {"after": SWEEP_AFTER_S,
                                                  "keep": SIGNIN_LOG_KEEP_S}).scalar()
        return int(swept or 0)
