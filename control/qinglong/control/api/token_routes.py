"""Token management routes (admin; docs/protocols.md §4.5, issue 11 item 7).

``POST /v1/tokens`` answers the new token once (only its SHA-256 is stored); a worker token
names an existing pool (pools are created by ``ql3 control token create --pool`` as the
schema owner: the runtime role only reads them). Listing never shows a token or its hash.
A revoked token is refused at its next request; a token whose ``revoked_at`` is still ahead
(``revocation_pending``: a rotation's overlap, ``ql3 control token import --ensure
--overlap``) authenticates until then, and revoking it here ends it at once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from sqlalchemy import select

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.api.models_common import ERRORS, ErrorBody
from qinglong.control.api.security import require
from qinglong.control.auth.tokens import insert_token, list_tokens, new_token, revoke_token
from qinglong.control.auth.tokens import token_hash as hash_of
from qinglong.control.db.tables import worker_pools
from qinglong.control.errors import TokenNameTakenError

router = APIRouter(tags=["tokens"], responses=ERRORS,
                   dependencies=[Depends(require("admin"))])
POOL_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"


class TokenCreate(BaseModel):
    """A new token: ``name`` (1–100 characters), ``scope``; ``pool`` exactly for worker."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"name": "ci", "scope": "viewer"}]})
    name: Annotated[str, StringConstraints(min_length=1, max_length=100,
                                           pattern=r"^[^\x00-\x1f\x7f]+$")]
    scope: Literal["viewer", "operator", "admin", "worker"]
    pool: Annotated[str, Field(pattern=POOL_PATTERN)] | None = None


class TokenOut(BaseModel):
    """A token's record (never the token or its hash). ``revoked_at`` may lie ahead:
    ``revocation_pending`` then, and the token authenticates until that time."""

    id: str
    name: str
    scope: str
    pool: str | None
    created_at: datetime
    revoked_at: datetime | None
    revocation_pending: bool


class TokenIssued(TokenOut):
    """The record plus ``token``, shown this once."""

    token: str


def _one(conn: Any, token_id: str) -> TokenOut | None:
    for row in list_tokens(conn):
        if row["id"] == token_id:
            return TokenOut(**row)
    return None


@router.get("/v1/tokens", response_model=list[TokenOut])
def get_tokens(request: Request) -> list[TokenOut]:
    """Every token's record, oldest first."""
    with get_context(request).engine.connect() as conn:
        return [TokenOut(**row) for row in list_tokens(conn)]


@router.post("/v1/tokens", status_code=201, response_model=TokenIssued,
             responses={409: {"model": ErrorBody,
                              "description": "token_name_taken: a live token has the name"}})
def post_token(body: TokenCreate, request: Request) -> TokenIssued:
    """Issue a token; the answer holds it once. 422 when a pool is given for a non-worker
    scope or missing for a worker one; 404 ``pool_not_found``; 409 ``token_name_taken``
    when a live token has the name (a revoked one frees it)."""
    if (body.scope == "worker") != (body.pool is not None):
        raise ApiError(422, "invalid_request", "a worker token needs a pool; others take none")
    token = new_token()
    with get_context(request).engine.begin() as conn:
        pool_id = None
        if body.pool is not None:
            pool_id = conn.execute(select(worker_pools.c.id).where(
                worker_pools.c.name == body.pool)).scalar()
            if pool_id is None:
                raise ApiError(404, "pool_not_found", "no worker pool has this name")
        try:
            token_id = insert_token(conn, name=body.name, scope=body.scope,
                                    sha256=hash_of(token), pool_id=pool_id)
        except TokenNameTakenError:
            raise ApiError(409, "token_name_taken", "a live token already has this name; "
                                                    "revoke it first or choose another "
                                                    "name") from None
        out = _one(conn, token_id)
    assert out is not None
    return TokenIssued(**out.model_dump(), token=token)


@router.post("/v1/tokens/{token_id}/revoke", response_model=TokenOut)
def post_revoke(token_id: UUID, request: Request) -> TokenOut:
    """Revoke a token now (idempotent), also one whose revocation is pending; its next
    request is refused. 404 when unknown."""
    with get_context(request).engine.begin() as conn:
        revoke_token(conn, str(token_id))
        out = _one(conn, str(token_id))
    if out is None:
        raise ApiError(404, "token_not_found", "no token has this id")
    return out
