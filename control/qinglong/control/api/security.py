"""Bearer-token authentication and scope checks as FastAPI dependencies (docs/protocols.md §4.5).

``require("viewer" | "operator" | "admin" | "worker")`` returns a dependency that answers
401 ``unauthenticated`` (no, malformed, unknown or revoked token: one answer for all) or 403
``forbidden`` (a valid token without the scope) and otherwise yields the ``Principal``.
A revoked token is refused at its next request: every request reads the token row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from qinglong.control.api.context import get_context
from qinglong.control.api.errors import ApiError
from qinglong.control.auth.tokens import Principal, authenticate

_bearer = HTTPBearer(auto_error=False)


def require(scope: str) -> Callable[..., Principal]:
    """A dependency yielding the request's Principal when its token includes ``scope``."""

    def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise ApiError(401, "unauthenticated", "a bearer token is required")
        with get_context(request).engine.connect() as conn:
            principal = authenticate(conn, credentials.credentials)
        if principal is None:
            raise ApiError(401, "unauthenticated", "the token is unknown or revoked")
        if not principal.allows(scope):
            raise ApiError(403, "forbidden", f"this token lacks the {scope} scope")
        return principal

    return dependency
