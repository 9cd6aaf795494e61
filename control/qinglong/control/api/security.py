"""Bearer-token authentication and scope checks as FastAPI dependencies (docs/protocols.md §4.5).

``require("viewer" | "operator" | "admin" | "worker")`` returns a dependency that answers
401 ``unauthenticated`` (no, malformed, unknown or revoked token: one answer for all) or 403
``forbidden`` (a valid token without the scope) and otherwise yields the ``Principal``.
A revoked token is refused at its next request: every request reads the token row.

The worker routes read it inside their step's own transaction instead, as its first statement
(``bearer_token`` as the dependency, then ``authorize`` on the step's connection): the same
read by the same database clock, without a connection and a transaction of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.auth.tokens import Principal, authenticate

if TYPE_CHECKING:
    from sqlalchemy import Connection

_bearer = HTTPBearer(auto_error=False)


async def bearer_token(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The request's bearer token, unchecked (``authorize`` reads its row); 401
    ``unauthenticated`` when there is none. Reads no database."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(401, "unauthenticated", "a bearer token is required")
    return credentials.credentials


def authorize(conn: Connection, token: str, scope: str) -> Principal:
    """The Principal of ``token`` read on ``conn`` (inside the caller's transaction, by its
    database clock) when it includes ``scope``; ApiError 401 ``unauthenticated`` (unknown,
    revoked or malformed) or 403 ``forbidden`` otherwise."""
    principal = authenticate(conn, token)
    if principal is None:
        raise ApiError(401, "unauthenticated", "the token is unknown or revoked")
    if not principal.allows(scope):
        raise ApiError(403, "forbidden", f"this token lacks the {scope} scope")
    return principal


def require(scope: str) -> Callable[..., Principal]:
    """A dependency yielding the request's Principal when its token includes ``scope``."""

    def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise ApiError(401, "unauthenticated", "a bearer token is required")
        with get_context(request).engine.connect() as conn:
            return authorize(conn, credentials.credentials, scope)

    return dependency
