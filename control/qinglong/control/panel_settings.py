"""The cluster panel's Settings page over control's services (docs/panel.md "Cluster",
Settings; DESIGN §4.6): push channels (by target, never their URL) and their test, API
tokens (create, list, revoke) and the panel's sign-in log.

Scopes are the API's: ``/v1/tokens`` and ``/v1/notify`` are admin-only, so the page shows
these sections to an admin session only, and every method here refuses any other session
(``BackendRefusedError`` ``forbidden``) even when the panel's own check was passed by.
"""

from __future__ import annotations

from datetime import UTC
from typing import TYPE_CHECKING, Any

from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError
from qinglong.panel.security import current_session

if TYPE_CHECKING:
    from qinglong.control.api.context import ApiContext

SIGNIN_LOG_ROWS = 50
TOKEN_ROWS = 200
#: scopes a token made from the panel may have (a worker token needs a pool: the CLI's)
PANEL_SCOPES = ("viewer", "operator", "admin")

_TOKENS = """
SELECT t.id::text AS id, t.name, t.scope, p.name AS pool, t.created_at, t.revoked_at,
       coalesce(t.revoked_at > now(), false) AS revocation_pending,
       greatest(t.last_used_at, (SELECT max(s.last_seen_at) FROM panel_sessions s
                                 WHERE s.token_id = t.id)) AS last_used_at
FROM api_tokens t LEFT JOIN worker_pools p ON p.id = t.pool_id
ORDER BY (t.revoked_at IS NOT NULL AND t.revoked_at <= now()), t.created_at DESC, t.id
LIMIT %(limit)s
"""
_SIGNINS = """
SELECT at, client, ok, token_name FROM panel_signins ORDER BY at DESC, id DESC
LIMIT %(limit)s
"""
_CHANNELS = """
SELECT id::text AS id, target, notify_on, created_by, created_at FROM notify_channels
ORDER BY created_at
"""


def _iso(value: Any) -> str | None:
    """A database time as ISO UTC to the second (``2026-12-02T11:44:14Z``), or None."""
    if value is None:
        return None
    return str(value.astimezone(UTC).replace(microsecond=0).isoformat()).replace(
        "+00:00", "Z")


class SettingsMixin:
    """The Settings methods of ``ControlPanelBackend`` (``self.ctx``: the replica's
    ApiContext). Every method blocks; database errors are BackendUnavailableError."""

    ctx: ApiContext

    @staticmethod
    def _admin() -> str:
        """The acting admin's token name; BackendRefusedError ``forbidden`` otherwise."""
        session = current_session.get()
        if session is None or session.scope != "admin":
            raise BackendRefusedError("forbidden", "only an admin sign-in may do this")
        return session.actor or "panel"

    def _db(self, fn: Any) -> Any:
        from sqlalchemy.exc import OperationalError

        try:
            return fn()
        except OperationalError:
            raise BackendUnavailableError("the database cannot be reached") from None

    def settings(self) -> dict[str, Any]:
        """The page's facts: ``{"profile": "cluster", "admin": bool, "channels": [{"id",
        "target", "notify_on", "created_by", "created_at"}], "tokens": [{"id", "name",
        "scope", "pool", "created_at", "last_used_at", "revoked_at", "state"}],
        "signins": [{"at", "client", "ok", "token_name"}]}``; ``state`` is ``live``,
        ``expiring`` (a pending revocation: valid until ``revoked_at``) or ``revoked``.
        Tokens: live and expiring ones first, newest first; sign-ins newest first.
        A non-admin session gets ``admin`` False and empty lists (nothing is read).
        Times are ISO UTC to the second; "last used" is the newer of the token's recorded
        use and its panel sessions' last request."""
        session = current_session.get()
        if session is None or session.scope != "admin":
            return {"profile": "cluster", "admin": False, "channels": [], "tokens": [],
                    "signins": []}

        def read() -> dict[str, Any]:
            with self.ctx.engine.connect() as conn:
                channels = [dict(r) for r in conn.exec_driver_sql(_CHANNELS).mappings()]
                tokens = [dict(r) for r in conn.exec_driver_sql(
                    _TOKENS, {"limit": TOKEN_ROWS}).mappings()]
                signins = [dict(r) for r in conn.exec_driver_sql(
                    _SIGNINS, {"limit": SIGNIN_LOG_ROWS}).mappings()]
            return {"profile": "cluster", "admin": True,
                    "channels": [{**c, "channel": "apprise",
                                  "notify_on": list(c["notify_on"]),
                                  "created_at": _iso(c["created_at"])} for c in channels],
                    "tokens": [_token_view(t) for t in tokens],
                    "signins": [{**s, "at": _iso(s["at"])} for s in signins]}

        result: dict[str, Any] = self._db(read)
        return result

    def notify_test(self) -> dict[str, Any]:
        """Send a sample through every channel now, by the real notify path
        (``notify.test_channels``, as ``POST /v1/notify/test``): ``{"configured": bool,
        "deliveries": [{"channel": target, "ok": bool}]}`` (no error text: it may quote a
        channel's answer)."""
        from qinglong.control import notify

        self._admin()
        sent = self._db(lambda: notify.test_channels(self.ctx.engine,
                                                     self.ctx.extras.get("keyring")))
        return {"configured": bool(sent),
                "deliveries": [{"channel": d["target"], "ok": bool(d["ok"])} for d in sent]}

    # -- push channels (as POST/DELETE /v1/notify/channels: admin) --
    def channel_add(self, url: str, notify_on: list[str]) -> dict[str, Any]:
        """Add a push channel through ``notify_channels.add_channel`` (the API's service):
        ``{"id", "target"}``, never the URL. BackendRefusedError ``invalid_channel``
        (usage) or ``secrets_key_missing``; neither message quotes the URL."""
        from qinglong.control import notify_channels
        from qinglong.control.secrets.store import SecretsKeyMissingError

        who = self._admin()
        try:
            row = self._db(lambda: notify_channels.add_channel(
                self.ctx.engine, self.ctx.extras.get("keyring"), url,
                notify_on or list(notify_channels.DEFAULT_ON), who))
        except notify_channels.InvalidChannelError:
            raise BackendRefusedError("invalid_channel", "not an Apprise URL",
                                      usage=True) from None
        except SecretsKeyMissingError:
            raise BackendRefusedError("secrets_key_missing", "this replica has no "
                                      "keyring to seal channel URLs") from None
        return {"id": row["id"], "target": row["target"]}

    def channel_get(self, channel_id: str) -> dict[str, Any]:
        """One channel as in :meth:`settings` (admin); BackendRefusedError ``not_found``."""
        self._admin()
        _check_id(channel_id)
        for channel in self.settings()["channels"]:
            if channel["id"] == channel_id:
                return dict(channel)
        raise BackendRefusedError("not_found", "no channel has this id", usage=True)

    def channel_remove(self, channel_id: str) -> dict[str, Any]:
        """Remove a channel through ``notify_channels.remove_channel`` (admin);
        BackendRefusedError ``not_found``."""
        from qinglong.control import notify_channels

        self._admin()
        _check_id(channel_id)
        if not self._db(lambda: notify_channels.remove_channel(self.ctx.engine, channel_id)):
            raise BackendRefusedError("not_found", "no channel has this id", usage=True)
        return {"id": channel_id, "removed": True}

    def token_create(self, name: str, scope: str) -> dict[str, Any]:
        """Issue an API token (as ``POST /v1/tokens``): ``{"id", "name", "scope",
        "token"}``, the token shown this once (only its SHA-256 is stored).
        BackendRefusedError ``invalid_name`` (1–100 characters, no control characters),
        ``invalid_scope`` (viewer, operator or admin) or ``token_name_taken``."""
        from qinglong.control.auth.tokens import insert_token, new_token, token_hash
        from qinglong.control.errors import TokenNameTakenError

        self._admin()
        name = name.strip()
        if not 1 <= len(name) <= 100 or any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise BackendRefusedError("invalid_name", "a name of 1-100 characters, without "
                                      "control characters", usage=True)
        if scope not in PANEL_SCOPES:
            raise BackendRefusedError("invalid_scope", "viewer, operator or admin",
                                      usage=True)
        token = new_token()

        def write() -> str:
            with self.ctx.engine.begin() as conn:
                return insert_token(conn, name=name, scope=scope, sha256=token_hash(token),
                                    pool_id=None)

        try:
            token_id = self._db(write)
        except TokenNameTakenError:
            raise BackendRefusedError("token_name_taken", "a live token already has this "
                                      "name", usage=True) from None
        return {"id": token_id, "name": name, "scope": scope, "token": token}

    def token_get(self, token_id: str) -> dict[str, Any]:
        """One token's record as in :meth:`settings` (admin); BackendRefusedError
        ``not_found``."""
        self._admin()
        _check_id(token_id)

        def read() -> list[dict[str, Any]]:
            with self.ctx.engine.connect() as conn:
                return [dict(r) for r in conn.exec_driver_sql(
                    _TOKENS.replace("ORDER BY", "WHERE t.id = %(id)s ORDER BY"),
                    {"limit": 1, "id": token_id}).mappings()]

        found: list[dict[str, Any]] = self._db(read)
        if not found:
            raise BackendRefusedError("not_found", "no token has this id", usage=True)
        return _token_view(found[0])

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        """Revoke a token now (as ``POST /v1/tokens/{id}/revoke``; idempotent): its sessions
        end at their next request, this one's too when it signed in with it."""
        from qinglong.control.auth.tokens import revoke_token

        self.token_get(token_id)  # admin, and known

        def write() -> None:
            with self.ctx.engine.begin() as conn:
                revoke_token(conn, token_id)

        self._db(write)
        return {"id": token_id, "revoked": True}


def _check_id(token_id: str) -> None:
    from uuid import UUID

    try:
        UUID(token_id)
    except ValueError:
        raise BackendRefusedError("not_found", "no token has this id", usage=True) from None


def _token_view(row: dict[str, Any]) -> dict[str, Any]:
    state = "live"
    if row["revocation_pending"]:
        state = "expiring"
    elif row["revoked_at"] is not None:
        state = "revoked"
    return {"id": row["id"], "name": row["name"], "scope": row["scope"],
            "pool": row["pool"], "created_at": _iso(row["created_at"]),
            "last_used_at": _iso(row["last_used_at"]), "revoked_at": _iso(row["revoked_at"]),
            "state": state}
