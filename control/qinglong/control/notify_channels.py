"""Adding and removing push channels (docs/protocols.md §4.5 "Push channels"): the one
service behind ``POST/DELETE /v1/notify/channels`` and the panel's Settings page.

A channel's URL is a secret as a whole: it is stored sealed once sealing is on and is
never answered or quoted in an error; a channel is shown by its ``target`` (scheme and
host, ``notify.channel_target``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Engine

from qinglong.control import notify
from qinglong.control.db.engine import run_named
from qinglong.shared.ids import uuid7

DEFAULT_ON = ("failed", "timed_out", "lost")


class InvalidChannelError(ValueError):
    """Text that is no Apprise URL (``scheme://rest``, no whitespace), or a status that is
    not one of ``notify.STATUSES``; the message never quotes the URL."""


def valid_url(url: str) -> bool:
    """True for ``scheme://rest``: a scheme of letters, digits, ``+.-`` (up to 32,
    starting with a letter), a non-empty rest, no whitespace."""
    scheme, sep, rest = url.partition("://")
    return bool(sep and rest and scheme[:1].isalpha() and len(scheme) <= 32
                and all(c.isalnum() or c in "+.-" for c in scheme)
                and not any(c.isspace() for c in url))


def add_channel(engine: Engine, keyring: Any, url: str, notify_on: Sequence[str],
                who: str | None) -> dict[str, Any]:
    """Insert a channel: ``{id, target, notify_on, created_by, created_at}`` (no URL).
    Raises InvalidChannelError, and ``SecretsKeyMissingError`` when URLs are sealed and
    ``keyring`` is None."""
    from qinglong.control.secrets.store import stored_channel_url

    url = url.strip()
    if not valid_url(url) or "\x00" in url:
        raise InvalidChannelError("give an Apprise URL such as bark://HOST/KEY, "
                                  "tgram://TOKEN/CHAT or json://HOST/PATH")
    on = list(dict.fromkeys(notify_on))
    if not on or any(s not in notify.STATUSES for s in on):
        raise InvalidChannelError("notify_on: one or more of " + ", ".join(notify.STATUSES))
    channel_id = str(uuid7())
    with engine.begin() as conn:
        stored, sealed = stored_channel_url(conn, keyring, channel_id, url)
        row = run_named(conn, (
            "INSERT INTO notify_channels (id, url, sealed_url, target, notify_on,"
            " created_by) VALUES (%(id)s, %(url)s, %(sealed)s, %(target)s, %(on)s,"
            " %(who)s) RETURNING id::text AS id, target, notify_on, created_by,"
            " created_at"),
            {"id": channel_id, "url": stored, "sealed": sealed,
             "target": notify.channel_target(url), "on": on, "who": who}).mappings().one()
    return dict(row)


def remove_channel(engine: Engine, channel_id: str) -> bool:
    """Delete a channel (its pending notifications go with it); False when none has this
    id (``channel_id`` must be a UUID's text)."""
    with engine.begin() as conn:
        gone = run_named(conn, "DELETE FROM notify_channels WHERE id = %(id)s",
                         {"id": channel_id}).rowcount
    return bool(gone)
