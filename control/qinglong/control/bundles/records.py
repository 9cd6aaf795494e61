"""Bundle records in PostgreSQL (docs/protocols.md §4.7): push, page, detail, removal and the
entry-point check of a task definition.

Every function runs in the caller's transaction on a connection acting as the runtime role
(SELECT, INSERT, DELETE on ``script_bundles``; rows are never updated). Removal relies on
the foreign key ``tasks.bundle_digest``: a task create or edit naming the bundle holds a
key-share lock on its row, so a removal and a task serialize — either the task commits
first and the delete fails its foreign-key check (409 ``bundle_in_use``), or the removal
commits first and the task's foreign key fails (422 ``bundle_not_found``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError

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

    Removed tasks' references to it are cleared first; then the delete runs, and the
    foreign key from ``tasks`` refuses it while a live task names the bundle — one that
    committed meanwhile included. UnknownBundleError when not recorded; BundleInUseError
    while a live task names it or a live attempt runs it (nothing changes then).
    """
    if find(conn, digest) is None:
        raise UnknownBundleError("no bundle has this digest")
    live_attempt = conn.execute(select(literal(1)).where(
        attempts.c.bundle_digest == digest, attempts.c.status.in_(LIVE_ATTEMPT)).limit(1)
    ).first()
    if live_attempt is not None:
        raise BundleInUseError("a live attempt runs this bundle")
    conn.execute(update(tasks).where(tasks.c.bundle_digest == digest,
                                     tasks.c.deleted_at.is_not(None))
                 .values(bundle_digest=None))
    try:
        with conn.begin_nested():
            deleted = conn.execute(delete(script_bundles)
                                   .where(script_bundles.c.digest == digest)
                                   .returning(script_bundles.c.digest)).first()
    except IntegrityError:
        raise BundleInUseError("a live task names this bundle") from None
    if deleted is None:  # removed by a concurrent rm
        raise UnknownBundleError("no bundle has this digest")


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
