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

from qinglong.control import notify, notify_channels
from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.security import require
from qinglong.control.api.task_models import _storable as storable
from qinglong.control.auth.tokens import Principal
from qinglong.control.db.engine import run_named

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


@router.get("/v1/notify/channels", response_model=list[ChannelOut])
def list_channels(request: Request) -> list[ChannelOut]:
    """Every channel, oldest first, by target (scheme and host)."""
    with get_context(request).engine.connect() as conn:
        rows = run_named(conn, "SELECT id::text AS id, target, notify_on, created_by,"
                               " created_at FROM notify_channels ORDER BY created_at").mappings()
        return [ChannelOut(**r) for r in rows]


@router.post("/v1/notify/channels", status_code=201, response_model=ChannelOut)
def add_channel(body: ChannelIn, request: Request, who: Admin) -> ChannelOut:
    """Add a channel (``notify_channels.add_channel``); 422 ``invalid_channel`` for text
    that is no URL (never echoed)."""
    from qinglong.control.secrets.store import SecretsKeyMissingError

    ctx = get_context(request)
    try:
        row = notify_channels.add_channel(ctx.engine, ctx.extras.get("keyring"), body.url,
                                          body.notify_on, who.name)
    except notify_channels.InvalidChannelError:
        raise ApiError(422, "invalid_channel", "give an Apprise URL such as bark://HOST/KEY, "
                                               "tgram://TOKEN/CHAT or json://HOST/PATH") from None
    except SecretsKeyMissingError:
        raise ApiError(503, "secrets_key_missing", "channel URLs are sealed and this replica "
                       "has no keyring: start it with --secrets-keyring") from None
    return ChannelOut(**row)


@router.delete("/v1/notify/channels/{channel_id}", status_code=204, response_class=Response)
def remove_channel(channel_id: UUID, request: Request) -> Response:
    """Remove a channel (``notify_channels.remove_channel``); 404 ``not_found``."""
    gone = notify_channels.remove_channel(get_context(request).engine, str(channel_id))
    if not gone:
        raise ApiError(404, "not_found", "no channel has this id")
    return Response(status_code=204)


@router.post("/v1/notify/test")
async def test_channels(request: Request) -> list[dict[str, Any]]:
    """Send a sample notification through every channel now (each within 10 s)."""
    ctx = get_context(request)
    return await run_in_threadpool(notify.test_channels, ctx.engine, ctx.extras.get("keyring"))
