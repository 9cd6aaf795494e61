"""Typed dispatch errors (docs/protocols.md §4.2); the API maps each ``code`` to one HTTP status."""

from __future__ import annotations

from qinglong.shared.errors import ConflictError, QinglongError


class DispatchError(QinglongError):
    """Base of the dispatch protocol's refusals. ``status`` is the HTTP answer."""

    code = "dispatch_error"
    status = 409


class LeaseLostError(DispatchError, ConflictError):
    """The write's (attempt id, lease token, lease version) is not a live lease of the caller's
    pool (recovered, re-claimed, expired on the database clock, or never its own): the worker
    must kill that attempt's process group at once (docs/protocols.md §4.2 fencing)."""

    code = "lease_lost"
    status = 409


class CompletionConflictError(LeaseLostError):
    """A second completion on an already completed lease with different content: refused,
    the first one stays recorded."""

    code = "completion_conflict"


class LabelsOutsidePoolError(DispatchError):
    """A worker declared labels its pool does not allow (docs/protocols.md §4.2, worker pools)."""

    code = "labels_outside_pool"
    status = 403


class UnknownIncarnationError(DispatchError):
    """The incarnation is unknown, stopped, or of another pool: the worker must register."""

    code = "unknown_incarnation"
    status = 409


class LogMismatchError(DispatchError):
    """The log object S3 reports differs from what the worker claimed (size, identity
    metadata, checksum, content type) or is absent: the completion changes nothing.
    ``field`` names what differed, never a value."""

    code = "log_mismatch"
    status = 409

    def __init__(self, field: str) -> None:
        super().__init__(f"the uploaded log does not match the claim: {field}")
        self.field = field


class LogStoreUnavailableError(DispatchError):
    """No bucket is configured, or S3 could not be asked: retry later."""

    code = "log_store_unavailable"
    status = 503


class BundleNotFoundError(DispatchError):
    """The requested bundle is not the one the live lease's attempt was claimed with, or it
    is no longer recorded (docs/protocols.md §4.7): the attempt fails ``bundle_unavailable``."""

    code = "bundle_not_found"
    status = 404
