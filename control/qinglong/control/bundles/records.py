"""Bundle records in PostgreSQL (docs/protocols.md §4.6): push, page, detail, removal and the
entry-point check of a task definition.

Every function runs in the caller's transaction on a connection acting as the runtime role
(SELECT, INSERT, DELETE on ``script_bundles``; rows are never updated). Removal locks the
bundle row first, then counts live users: a task create or edit naming the bundle takes a
key-share lock on that row through its foreign key, so the two serialize — either the task
commits first and the removal sees it (409), or the removal commits first and the task's
foreign key fails (422 ``bundle_not_found``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, delete, func, literal, select
from sqlalchemy.dialects.postgresql import insert

from qinglong.control.bundles.errors import (
    BundleInUseError,
    EntryPointNotFoundError,
    UnknownBundleError,
)
from qinglong.control.bundles.objects import object_key
from qinglong.control.db.tables import attempts, script_bundles, tasks
from qinglong.shared.bundles import Manifest

if TYPE_CHECKING:
    from sqlalchemy import Connection, RowMapping

LIVE_ATTEMPT = ("claimed", "starting", "running")
SUMMARY = (script_bundles.c.digest, script_bundles.c.size_bytes,
           script_bundles.c.member_count, script_bundles.c.unpacked_bytes,
           script_bundles.c.created_by, script_bundles.c.created_at)


def _used_by() -> Any:
    """Correlated count of live tasks naming the row's bundle."""
    return (select(func.count()).select_from(tasks)
            .where(tasks.c.bundle_digest == script_bundles.c.digest,
                   tasks.c.deleted_at.is_(None))
            .scalar_subquery().label("used_by"))


def find(conn: Connection, digest: str) -> RowMapping | None:
    """The summary of bundle ``digest`` with ``used_by``, or None."""
    return conn.execute(select(*SUMMARY, _used_by())
                        .where(script_bundles.c.digest == digest)).mappings().first()


def record(conn: Connection, digest: str, size_bytes: int, manifest: Manifest,
           by: str) -> bool:
    """Insert the bundle's row; False when a row for ``digest`` exists already (a push of
    the same bytes: nothing changes)."""
    inserted = conn.execute(insert(script_bundles).values(
        digest=digest, object_key=object_key(digest), size_bytes=size_bytes,
        member_count=manifest.member_count, unpacked_bytes=manifest.unpacked_bytes,
        members=[m.to_json() for m in manifest.members], created_by=by,
    ).on_conflict_do_nothing(index_elements=["digest"]).returning(script_bundles.c.digest))
    return inserted.first() is not None


def page(conn: Connection, cursor: str | None, limit: int) -> list[RowMapping]:
    """Up to ``limit`` bundles ordered by digest, after ``cursor`` (a digest), with
    ``used_by``."""
    query = select(*SUMMARY, _used_by())
    if cursor is not None:
        query = query.where(script_bundles.c.digest > cursor)
    return list(conn.execute(query.order_by(script_bundles.c.digest).limit(limit)).mappings())


def detail(conn: Connection, digest: str) -> tuple[RowMapping, list[dict[str, Any]], list[str]]:
    """(summary with ``used_by``, members, names of the live tasks naming it, sorted).
    UnknownBundleError when not recorded."""
    row = find(conn, digest)
    if row is None:
        raise UnknownBundleError("no bundle has this digest")
    members = conn.execute(select(script_bundles.c.members)
                           .where(script_bundles.c.digest == digest)).scalar_one()
    names = conn.execute(select(tasks.c.name).where(
        tasks.c.bundle_digest == digest, tasks.c.deleted_at.is_(None))
        .order_by(tasks.c.name)).scalars().all()
    return row, list(members), list(names)


def remove(conn: Connection, digest: str) -> None:
    """Delete the row of ``digest`` (the caller deletes the object after commit).
    UnknownBundleError when not recorded; BundleInUseError while a live task names it or a
    live attempt runs it. Soft-deleted tasks lose their reference (ON DELETE SET NULL)."""
    locked = conn.execute(select(script_bundles.c.digest)
                          .where(script_bundles.c.digest == digest)
                          .with_for_update()).first()
    if locked is None:
        raise UnknownBundleError("no bundle has this digest")
    in_use = conn.execute(select(
        select(literal(1)).where(tasks.c.bundle_digest == digest,
                                 tasks.c.deleted_at.is_(None)).exists()
        | select(literal(1)).where(and_(attempts.c.bundle_digest == digest,
                                        attempts.c.status.in_(LIVE_ATTEMPT))).exists()
    )).scalar_one()
    if in_use:
        raise BundleInUseError("a live task names this bundle or an attempt runs it")
    conn.execute(delete(script_bundles).where(script_bundles.c.digest == digest))


def require_entry_point(conn: Connection, digest: str, entry_point: str) -> None:
    """UnknownBundleError when ``digest`` is not recorded; EntryPointNotFoundError when
    ``entry_point`` (normalized) is not a regular-file member of it."""
    row = conn.execute(select(
        script_bundles.c.members.contains([{"path": entry_point, "kind": "file"}]))
        .where(script_bundles.c.digest == digest)).first()
    if row is None:
        raise UnknownBundleError("no bundle has this digest")
    if not row[0]:
        raise EntryPointNotFoundError("the entry point is not a regular file of the bundle")
