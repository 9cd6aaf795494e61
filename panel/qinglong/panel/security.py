"""Sign-in, sessions, CSRF and response headers of the panel (docs/panel.md "Security").

Local sign-in is a one-time link printed by ``ql3 local web`` (like Jupyter's): the token is
good once, then a session cookie (``HttpOnly``, ``SameSite=Strict``, ``Path=/``) carries a
random session id held in this process's memory. Every state change (any method but GET and
HEAD) needs the session's CSRF token (form field ``csrf`` or header ``X-CSRF-Token``) and an
``Origin`` equal to the panel's own.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass

SESSION_COOKIE = "ql3_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"

#: every response (docs/panel.md "Security headers"): no inline script or style anywhere
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; style-src 'self'; script-src 'self'; "
                                "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class Session:
    """A signed-in browser: ``csrf`` is the token its forms must send back;
    ``signed_in_at``: when it signed in (``time.monotonic()`` seconds), for the pages that
    need a recent sign-in (docs/panel.md "Security": variables, 15 minutes)."""

    id: str
    csrf: str
    #: False for a read-only sign-in (the cluster's viewer token): no write controls shown,
    #: and every state change but sign-out and the language answers 403
    can_write: bool = True
    #: who acts (the cluster: the token's name, recorded as "by" in events); "" locally
    actor: str = ""
    #: the token's scope in the cluster (viewer, operator, admin); "" locally
    scope: str = ""
    #: when it signed in (``time.monotonic()`` seconds of this process; the cluster's
    #: store computes it from the session row's age by the database's clock)
    signed_in_at: float = 0.0

    def may(self, needed: str) -> bool:
        """True when this session may make a change the API allows to scope ``needed``
        (``operator`` or ``admin``; scopes nest viewer ⊂ operator ⊂ admin). A session without
        a scope (the local profile) may whenever it may write at all."""
        if not self.can_write:
            return False
        if not self.scope:
            return True
        rank = {"viewer": 1, "operator": 2, "admin": 3}
        return rank.get(self.scope, 0) >= rank.get(needed, 3)

    def recent(self, within_s: float = 15 * 60) -> bool:
        """True when the sign-in was at most ``within_s`` seconds ago."""
        return time.monotonic() - self.signed_in_at <= within_s


class Sessions:
    """The one-time sign-in token and the live sessions, in memory (thread-safe)."""

    def __init__(self, sign_in_token: str | None = None) -> None:
        self._lock = threading.Lock()
        self._token: str | None = sign_in_token or secrets.token_urlsafe(32)
        self._sessions: dict[str, Session] = {}

    @property
    def sign_in_token(self) -> str | None:
        """The unused one-time token, or None once used."""
        return self._token

    def redeem(self, token: str) -> Session | None:
        """A new session for the one-time ``token`` (constant-time compare); None when it is
        wrong or already used."""
        with self._lock:
            if self._token is None or not hmac.compare_digest(self._token, token):
                return None
            self._token = None
            return self._new()

    def set_link_token(self, token: str) -> None:
        """``token`` becomes the one-time sign-in token (``ql3 local web --new-link``),
        replacing an unused one. No lock: called from a signal handler, which must not wait
        for a lock its own thread may hold (one attribute store is atomic)."""
        self._token = token

    def _new(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32),
                          signed_in_at=time.monotonic())
        self._sessions[session.id] = session
        return session

    def renew(self, old: Session | None) -> Session:
        """A fresh session (new id and CSRF token, signed in now) replacing ``old``: after a
        password sign-in, so a session id seen before it is worth nothing."""
        with self._lock:
            if old is not None:
                self._sessions.pop(old.id, None)
            return self._new()

    def get(self, session_id: str | None) -> Session | None:
        """The session for a cookie value, or None."""
        if not session_id:
            return None
        with self._lock:
            return self._sessions.get(session_id)

    def sign_out(self, session_id: str | None) -> None:
        """Forget the session (no error when it is unknown)."""
        if session_id:
            with self._lock:
                self._sessions.pop(session_id, None)


class SignInThrottledError(Exception):
    """Too many failed sign-ins from this client address: ``retry_after_s`` whole seconds
    to wait (the panel answers 429 with ``Retry-After``)."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("sign-in throttled")
        self.retry_after_s = retry_after_s


class SignInRefusedError(Exception):
    """The sign-in token is wrong (unknown, revoked, malformed, or of a kind that may not
    sign in): one answer for all, 403."""


#: the session of the request being served, set by the app's guard before any endpoint runs
#: (worker threads of ``anyio.to_thread`` see it too): a backend that records who acted, as
#: control's does, reads it here instead of taking it as an argument
current_session: ContextVar[Session | None] = ContextVar("ql3_panel_session", default=None)


def csrf_ok(session: Session, sent: str | None) -> bool:
    """True when ``sent`` is the session's CSRF token (constant-time)."""
    return bool(sent) and hmac.compare_digest(session.csrf, str(sent))


def origin_ok(origin: str | None, scheme: str, host: str | None) -> bool:
    """True when the ``Origin`` header names this panel (``scheme://host``); a state change
    without an Origin is refused (every browser the panel supports sends one on POST)."""
    return bool(origin) and bool(host) and origin == f"{scheme}://{host}"
