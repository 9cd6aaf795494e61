"""Typed errors of the remote worker (docs/protocols.md §4.2); messages never carry the token,
task environment values or user output."""

from __future__ import annotations

from qinglong.shared.errors import QinglongError, ValidationError


class WorkerError(QinglongError):
    """Base of every error the worker raises on purpose."""

    code = "worker_error"


class LeaseLostError(WorkerError):
    """Control answered 409: this worker's lease on the attempt is gone (recovered, re-claimed
    or superseded). The attempt's group must be killed at once and the attempt forgotten
    (docs/protocols.md §4.2 fencing; case C21)."""

    code = "lease_lost"


class ControlAuthError(WorkerError):
    """Control refused the worker's token: 401 (unknown or revoked token) or 403 (the token's
    pool does not allow this request). ``status`` is the HTTP status and ``error_code`` the
    stable code of control's JSON error, if any (``labels_outside_pool``: the labels a worker
    declared at registration are not all in its token's pool)."""

    code = "worker_unauthorized"

    def __init__(self, status: int, error_code: str | None = None) -> None:
        if status == 401:
            what = "token refused (401): revoked or unknown"
        elif error_code == "labels_outside_pool":
            what = ("the declared labels (--labels) are outside the token's pool "
                    "(403 labels_outside_pool)")
        else:
            what = f"request forbidden for this token (403 {error_code or 'no code'})"
        super().__init__(f"control: {what}")
        self.status = status
        self.error_code = error_code


class ControlRejectedError(WorkerError):
    """Control answered 422 or another non-retryable 4xx: the request was invalid. ``status``
    is the HTTP status and ``error_code`` the stable code from control's JSON error, if any."""

    code = "worker_request_rejected"

    def __init__(self, status: int, error_code: str | None) -> None:
        super().__init__(f"control rejected the request ({status}, {error_code or 'no code'})")
        self.status = status
        self.error_code = error_code


class ControlUnavailableError(WorkerError):
    """Control could not be reached (connection errors, timeouts or 5xx) before the caller's
    deadline. ``cause`` names the last failure class (never a URL with a secret)."""

    code = "control_unavailable"

    def __init__(self, cause: str) -> None:
        super().__init__(f"control unavailable: {cause}")
        self.cause = cause


class WireAnswerError(WorkerError):
    """Control's answer did not decode as the wire type (shared/wire.py); ``reason`` holds the
    decoder's message (field names and, for lease timing, both numbers — never values of
    secrets)."""

    code = "wire_answer_invalid"

    def __init__(self, reason: str) -> None:
        super().__init__(f"invalid answer from control: {reason}")
        self.reason = reason


class SpoolError(WorkerError):
    """The private spool directory or a spool file is unsafe or cannot be prepared (a symlink,
    another owner, group/other permissions, an existing file)."""

    code = "spool_unsafe"


class TokenError(ValidationError):
    """The worker token is missing, empty, or its file is unsafe (not a regular file, or
    readable by group/other: it must be 0600 or stricter). A usage error (exit 2)."""

    code = "worker_token_invalid"
