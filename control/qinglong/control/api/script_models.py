"""Models of the script-bundle routes (docs/protocols.md §4.7)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel

DIGEST_PATTERN = r"^[0-9a-f]{64}$"


class ScriptOut(BaseModel):
    """A recorded bundle: ``digest`` (hex SHA-256 of the gzip tar bytes), ``size_bytes``
    (compressed), ``member_count`` (files and directories), ``unpacked_bytes`` (the files'
    total), ``created_at``."""

    digest: str
    size_bytes: int
    member_count: int
    unpacked_bytes: int
    created_at: datetime


class ScriptItem(ScriptOut):
    """A bundle in a listing: ``used_by`` counts the live tasks naming it."""

    used_by: int


class MemberOut(BaseModel):
    """One member: normalized ``path``, ``kind`` (``file`` or ``dir``), ``size_bytes`` and
    the sanitized ``mode`` (0o755 or 0o644, as an integer)."""

    path: str
    kind: str
    size_bytes: int
    mode: int


class ScriptDetail(ScriptItem):
    """A bundle with its members (archive order) and the names of the live tasks naming it
    (sorted)."""

    members: list[MemberOut]
    used_by_tasks: list[str]


class ScriptPage(BaseModel):
    """Bundles ordered by digest; ``next_cursor``: the digest to pass as ``cursor``."""

    items: list[ScriptItem]
    next_cursor: str | None
