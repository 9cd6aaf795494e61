"""Push-channel routes (docs/protocols.md §4.5 "Push channels"), admin scope only.

* ``GET /v1/notify/channels``: ``[{id, target, notify_on, created_by, created_at}]``;
  ``target`` is scheme and host: a channel URL (a secret as a whole) is never answered.
* ``POST /v1/notify/channels`` ``{url, notify_on?}``: 201 with the channel (no URL); the URL
  is stored sealed once sealing is on (503 ``secrets_key_missing`` without a keyring).
* ``DELETE /v1/notify/channels/{channel_id}``: 204; its pending notifications go with it.
* ``POST /v1/notify/test``: a sample to every channel now: ``[{id, target, ok, error?}]``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Request, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from qinglong.control import notify
from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.security import require
from qinglong.control.api.task_models import _storable as storable
from qinglong.control.auth.tokens import Principal
from qinglong.control.db.engine import run_named
from qinglong.shared.ids import uuid7

router = APIRouter(tags=["notify"], dependencies=[Depends(require("admin"))])
Admin = Annotated[Principal, Depends(require("admin"))]
Status = Literal["failed", "timed_out", "lost", "succeeded", "cancelled"]


class ChannelIn(BaseModel):
    """A channel: an Apprise URL (bark://…, tgram://…, json://…) and the statuses that
    notify (default failed, timed_out, lost)."""

    model_config = ConfigDict(extra="forbid")
    url: Annotated[str, Field(min_length=4, max_length=2048), AfterValidator(storable)]
    notify_on: list[Status] = Field(default=["failed", "timed_out", "lost"], min_length=1)


class ChannelOut(BaseModel):
    """A channel as answered: never its URL."""

    id: str
    target: str
    notify_on: list[str]
    created_by: str | None
    created_at: Any


def _valid(url: str) -> bool:
    scheme, sep, rest = url.partition("://")
    return bool(sep and rest and scheme[:1].isalpha() and len(scheme) <= 32
                and all(c.isalnum() or c in "+.-" for c in scheme)
                and not any(c.isspace() for c in url))


@router.get("/v1/notify/channels", response_model=list[ChannelOut])
def list_channels(request: Request) -> list[ChannelOut]:
    """Every channel, oldest first, by target (scheme and host)."""
    with get_context(request).engine.connect() as conn:
        rows = run_named(conn, "SELECT id::text AS id, target, notify_on, created_by,"
                               " created_at FROM notify_channels ORDER BY created_at").mappings()
        return [ChannelOut(**r) for r in rows]


@router.post("/v1/notify/channels", status_code=201, response_model=ChannelOut)
def add_channel(body: ChannelIn, request: Request, who: Admin) -> ChannelOut:
    """Add a channel; 422 ``invalid_channel`` for text that is no URL (never echoed)."""
    if not _valid(body.url):
        raise ApiError(422, "invalid_channel", "give an Apprise URL such as bark://HOST/KEY, "
                                               "tgram://TOKEN/CHAT or json://HOST/PATH")
    from qinglong.control.secrets.store import SecretsKeyMissingError, stored_channel_url

    ctx = get_context(request)
    channel_id = str(uuid7())
    try:
        with ctx.engine.begin() as conn:
            url, sealed = stored_channel_url(conn, ctx.extras.get("keyring"), channel_id,
                                             body.url.strip())
            row = run_named(conn, (
                "INSERT INTO notify_channels (id, url, sealed_url, target, notify_on,"
                " created_by) VALUES (%(id)s, %(url)s, %(sealed)s, %(target)s, %(on)s,"
                " %(who)s) RETURNING id::text AS id, target, notify_on, created_by,"
                " created_at"),
                {"id": channel_id, "url": url, "sealed": sealed,
                 "target": notify.channel_target(body.url),
                 "on": list(dict.fromkeys(body.notify_on)), "who": who.name}).mappings().one()
    except SecretsKeyMissingError:
        raise ApiError(503, "secrets_key_missing", "channel URLs are sealed and this replica "
                       "has no keyring: start it with --secrets-keyring") from None
    return ChannelOut(**row)


@router.delete("/v1/notify/channels/{channel_id}", status_code=204, response_class=Response)
def remove_channel(channel_id: UUID, request: Request) -> Response:
    """Remove a channel; 404 ``not_found``."""
    with get_context(request).engine.begin() as conn:
        gone = run_named(conn, "DELETE FROM notify_channels WHERE id = %(id)s",
                         {"id": str(channel_id)}).rowcount
    if not gone:
        raise ApiError(404, "not_found", "no channel has this id")
    return Response(status_code=204)


@router.post("/v1/notify/test")
async def test_channels(request: Request) -> list[dict[str, Any]]:
    """Send a sample notification through every channel now (each within 10 s)."""
    ctx = get_context(request)
    return await run_in_threadpool(notify.test_channels, ctx.engine, ctx.extras.get("keyring"))
