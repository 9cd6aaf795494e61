"""Typed errors of script bundles at control (docs/protocols.md §4.7); the API maps each
``code`` to one HTTP status. Messages never carry file content or member names."""

from __future__ import annotations

from qinglong.shared.errors import ConflictError, NotFoundError, QinglongError


class UnknownBundleError(NotFoundError):
    """No bundle with this digest is recorded."""

    code = "bundle_not_found"


class BundleInUseError(ConflictError):
    """A live task names the bundle, or a live attempt runs it: it cannot be removed."""

    code = "bundle_in_use"


class EntryPointNotFoundError(QinglongError):
    """The entry point is not a regular-file member of the named bundle."""

    code = "entry_point_not_found"


class BundleStoreError(QinglongError):
    """The bucket is not configured or could not be reached; ``cause`` names the failure
    class (never a URL or a credential). Retry later."""

    code = "bundle_store_unavailable"

    def __init__(self, cause: str) -> None:
        super().__init__(f"the bundle store is unavailable ({cause})")
        self.cause = cause
