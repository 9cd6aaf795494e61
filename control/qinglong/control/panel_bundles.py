"""The cluster panel's Scripts page over control's bundle services (docs/panel.md
"Scripts"; docs/protocols.md §4.7): the same functions as ``/v1/scripts`` — ``records.page``
and ``records.detail`` to read, ``push.push_bundle`` (the shared checker, the bucket, the
row) to upload, ``records.remove`` then the object's deletion to remove.

Scopes: every session reads; an operator or admin uploads (as ``POST /v1/scripts``);
removing needs an **admin** session (the panel is stricter than the API's operator, since
one click removes what every pool may run), and is refused while a live task names the
bundle or a live attempt runs it (``bundle_in_use``).
"""

from __future__ import annotations

import io
import logging
import tarfile
from typing import TYPE_CHECKING, Any

from qinglong.control.bundles import records
from qinglong.control.bundles.errors import (
    BundleInUseError,
    BundleStoreError,
    UnknownBundleError,
)
from qinglong.panel.backend import BackendRefusedError, BackendUnavailableError
from qinglong.panel.security import current_session
from qinglong.shared.bundles import MAX_COMPRESSED_BYTES, BundleError, normalize_name

if TYPE_CHECKING:
    from qinglong.control.api.context import ApiContext

_log = logging.getLogger("qinglong.control.panel")
PAGE = 50
MAX_SHOWN_BYTES = 128 * 1024  # a member shown on the page, as the local editor's limit
DIGEST_CHARS = frozenset("0123456789abcdef")


def _digest(text: str) -> str:
    if len(text) != 64 or not set(text) <= DIGEST_CHARS:
        raise BackendRefusedError("not_found", "no bundle has this digest", usage=True)
    return text


def _summary(row: Any) -> dict[str, Any]:
    return {"digest": row["digest"], "size_bytes": int(row["size_bytes"]),
            "member_count": int(row["member_count"]),
            "unpacked_bytes": int(row["unpacked_bytes"]), "created_by": row["created_by"],
            "created_at": row["created_at"].isoformat(), "used_by": int(row["used_by"])}


class BundlePanel:
    """The bundle methods of ControlPanelBackend (a mixin: ``ctx``, ``_actor`` and
    ``_guard`` are the backend's)."""

    ctx: ApiContext

    def _actor(self, write: bool) -> str:
        raise NotImplementedError

    def _guard(self, fn: Any) -> Any:
        raise NotImplementedError

    def bundles_list(self, after: str | None = None) -> dict[str, Any]:
        """One page of bundles ordered by digest after ``after`` (keyset):
        ``{"bundles": [summary with "used_by"], "next": digest or None}``."""
        cursor = None if after is None else _digest(after)

        def read() -> dict[str, Any]:
            with self.ctx.engine.connect() as conn:
                rows = records.page(conn, cursor, PAGE)
            items = [_summary(r) for r in rows]
            return {"bundles": items,
                    "next": items[-1]["digest"] if len(items) == PAGE else None}

        result: dict[str, Any] = self._guard(read)
        return result

    def bundle_show(self, digest: str) -> dict[str, Any]:
        """One bundle: the summary, ``members`` (``path, kind, size_bytes, mode``) and
        ``used_by_tasks`` (names of live tasks); BackendRefusedError ``not_found``."""
        key = _digest(digest)

        def read() -> dict[str, Any]:
            try:
                with self.ctx.engine.connect() as conn:
                    row, members, names = records.detail(conn, key)
            except UnknownBundleError:
                raise BackendRefusedError("not_found", "no bundle has this digest",
                                          usage=True) from None
            return {**_summary(row), "members": members, "used_by_tasks": names}

        result: dict[str, Any] = self._guard(read)
        return result

    def bundle_file(self, digest: str, path: str) -> dict[str, Any]:
        """One regular-file member read from the bucket: ``{"digest", "path", "content"
        (None: not UTF-8 or over 128 KiB), "size"}``; ``not_found`` for an unknown bundle
        or member; BackendUnavailableError when the bucket cannot be reached."""
        shown = self.bundle_show(digest)
        wanted = next((m for m in shown["members"]
                       if m["path"] == path and m["kind"] == "file"), None)
        if wanted is None:
            raise BackendRefusedError("not_found", "no such file in this bundle", usage=True)
        size = int(wanted["size_bytes"])
        if size > MAX_SHOWN_BYTES:
            return {"digest": shown["digest"], "path": path, "content": None, "size": size}
        data = self._member(shown["digest"], path)
        try:
            content: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            content = None
        return {"digest": shown["digest"], "path": path, "content": content, "size": size}

    def _member(self, digest: str, path: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        from qinglong.control.bundles.objects import object_key

        if self.ctx.s3 is None or not self.ctx.bucket:
            raise BackendUnavailableError("no bucket is configured")
        try:
            body = self.ctx.s3.get_object(Bucket=self.ctx.bucket, Key=object_key(digest))
            archive = body["Body"].read(MAX_COMPRESSED_BYTES + 1)
        except (BotoCoreError, ClientError):
            raise BackendUnavailableError("the bundle store cannot be reached") from None
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            for member in tar:
                try:
                    name = normalize_name(member.name, "a member")
                except BundleError:
                    continue
                if name == path and member.isreg():
                    handle = tar.extractfile(member)
                    if handle is not None:
                        return handle.read(MAX_SHOWN_BYTES + 1)
        raise BackendRefusedError("not_found", "no such file in this bundle", usage=True)

    def bundle_push(self, data: bytes) -> dict[str, Any]:
        """Push a gzip tar as ``POST /v1/scripts`` does (operator or admin): the summary
        plus ``created``. A refused archive is BackendRefusedError ``bundle_invalid`` or
        ``bundle_too_large`` (usage, with the checker's message: never content);
        ``bundle_store_unavailable`` when the bucket cannot be reached."""
        from qinglong.control.bundles.push import push_bundle

        by = self._actor(write=True)

        def write() -> dict[str, Any]:
            try:
                row, created = push_bundle(self.ctx.engine, self.ctx.s3, self.ctx.bucket,
                                           io.BytesIO(data), by)
            except BundleError as exc:
                raise BackendRefusedError(exc.code, str(exc).partition(": ")[2],
                                          usage=True) from None
            except BundleStoreError as exc:
                raise BackendRefusedError(exc.code, str(exc)) from None
            return {**_summary(row), "created": created}

        result: dict[str, Any] = self._guard(write)
        return result

    def bundle_remove(self, digest: str) -> dict[str, Any]:
        """Remove an unused bundle (admin): the row, then its object (a failed object
        delete is logged; a re-push puts it back). ``bundle_in_use`` while a live task
        names it or a live attempt runs it; ``forbidden`` for a session under admin."""
        from qinglong.control.bundles.objects import delete_bundle

        key = _digest(digest)
        session = current_session.get()
        if session is None or session.scope != "admin":
            raise BackendRefusedError("forbidden", "removing a bundle needs an admin token")
        self._actor(write=True)

        def write() -> dict[str, Any]:
            try:
                with self.ctx.engine.begin() as conn:
                    records.remove(conn, key)
            except UnknownBundleError:
                raise BackendRefusedError("not_found", "no bundle has this digest",
                                          usage=True) from None
            except BundleInUseError as exc:
                raise BackendRefusedError(exc.code, str(exc)) from None
            return {"digest": key}

        result: dict[str, Any] = self._guard(write)
        if self.ctx.s3 is not None and self.ctx.bucket:
            try:
                delete_bundle(self.ctx.s3, self.ctx.bucket, key)
            except BundleStoreError as exc:
                _log.warning("bundle %s: object not deleted (%s)", key, exc.cause)
        return result
