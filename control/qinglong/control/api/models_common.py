"""Models shared by several route modules: the error body and the run reference
(docs/protocols.md §4.5: errors are JSON with a stable code)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorDetail(BaseModel):
    """``code``: a stable snake_case name; ``message``: one line naming fields, never
    values. Some errors add fixed facts (e.g. ``retired_at`` and ``outcome`` of a retired
    log)."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every answer that is not a success."""

    error: ErrorDetail


ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorBody, "description": "json_not_utf8, json_too_deep or "
                                             "json_number_too_long (api/json_body.py)"},
    401: {"model": ErrorBody, "description": "no, malformed, unknown or revoked token"},
    403: {"model": ErrorBody, "description": "the token lacks the scope"},
    404: {"model": ErrorBody, "description": "not found"},
    413: {"model": ErrorBody, "description": "body_too_large"},
    422: {"model": ErrorBody, "description": "invalid request (fields named, values never)"},
}


class RunRef(BaseModel):
    """A run just created: its ``id`` and per-task ``number``."""

    id: str
    number: int | None
