"""Typed errors of ``ql3 cluster`` (docs/protocols.md §4.5; issue 13 item 2): one class per
failure class, each one line for people, mapped to exit codes by ``ql3``'s one error mapping
(``local/app/cli.py``: a ValidationError or NotFoundError exits 2, any other QinglongError
exits 1).

Messages name the control URL (its user-info removed), the task or run asked for and
control's stable error code; never the token, a request body or a secret.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from qinglong.shared.errors import ConflictError, NotFoundError, QinglongError, ValidationError

if TYPE_CHECKING:  # the packer (tarfile, gzip) loads with `script push` only
    from qinglong.shared.bundles import PackError


class ClusterClientError(QinglongError):
    """Base of the errors that come from talking to control (exit 1 unless a subclass is a
    usage error). ``url`` is the base URL concerned, shown without user-info."""

    code = "cluster_client_error"

    def __init__(self, message: str, url: str = "") -> None:
        super().__init__(message)
        self.url = url


class ControlUnreachableError(ClusterClientError):
    """No base URL answered: ``cannot reach control at URL: connection refused``. ``urls``
    lists the URLs tried (comma-separated); ``reason`` says why in words — one reason for
    all, or ``URL: reason`` pairs separated by ``; `` when they failed differently."""

    code = "control_unreachable"

    def __init__(self, urls: str, reason: str, *, per_url: bool = False) -> None:
        super().__init__(f"cannot reach control at {reason if per_url else f'{urls}: {reason}'}",
                         urls)
        self.reason = reason


class TokenMissingError(ValidationError):
    """``QL3_TOKEN`` is unset or empty (exit 2); nothing was sent."""

    code = "token_missing"

    def __init__(self) -> None:
        super().__init__("QL3_TOKEN", "not set: export a token issued by `ql3 control "
                                      "token create` (never put it on the command line)")


class TokenRejectedError(ClusterClientError):
    """401: control does not know the token (unknown, revoked or malformed)."""

    code = "token_rejected"

    def __init__(self, url: str) -> None:
        super().__init__(f"token rejected by control at {url}: set QL3_TOKEN to a valid "
                         "token", url)


class ScopeError(ClusterClientError):
    """403: the token is valid but lacks the scope (``viewer`` reads, ``operator`` runs,
    cancels, enables and disables, ``admin`` adds, edits and removes tasks)."""

    code = "forbidden"


class ControlNotFoundError(NotFoundError):
    """404: no such task (``no such task 'x'``), attempt or log (exit 2); ``error_code`` is
    control's stable code (``task_not_found``, ``log_pending``, ``log_not_found``…)."""

    code = "control_not_found"

    def __init__(self, message: str, error_code: str = "") -> None:
        super().__init__(message)
        self.error_code = error_code


class ControlConflictError(ConflictError):
    """409: the request conflicts with the state (``task_exists``, ``run_refused``,
    ``already_finished``); ``error_code`` is control's stable code."""

    code = "control_conflict"

    def __init__(self, message: str, error_code: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class LogRetiredError(ClusterClientError):
    """410: retention retired the log; ``retired_at`` (ISO-8601 UTC) and ``outcome``
    (``deleted`` / ``already_absent``) say when and how."""

    code = "log_retired"

    def __init__(self, message: str, retired_at: str | None, outcome: str | None) -> None:
        super().__init__(message)
        self.retired_at = retired_at
        self.outcome = outcome


class LogUnavailableError(ClusterClientError):
    """An attempt ended with reason ``log_unavailable``: its worker could not store the log
    in the object store (docs/protocols.md §4.9), so what it streamed live is all there is
    and may be incomplete. ``logs`` prints that partial log, then exits 1 with this line."""

    code = "log_unavailable"

    def __init__(self, attempt_number: int) -> None:
        super().__init__(f"attempt {attempt_number}'s log may be incomplete: the object "
                         "store was unavailable")
        self.attempt_number = attempt_number


class ControlRejectedError(ValidationError):
    """422 (or another 4xx): control refused the input; its message names the fields,
    never their values (exit 2)."""

    code = "control_rejected"

    def __init__(self, message: str) -> None:
        QinglongError.__init__(self, message)
        self.field = "request"


class ControlNotReadyError(ClusterClientError):
    """503: the replica cannot serve now (``database_unavailable``, the log store away…);
    ``reasons`` are ``/readyz``'s named reasons when it gave any."""

    code = "control_not_ready"

    def __init__(self, message: str, url: str, reasons: list[str]) -> None:
        super().__init__(message, url)
        self.reasons = reasons


class ControlFailedError(ClusterClientError):
    """Any other answer (500, an unexpected status, a body that is not the expected JSON)."""

    code = "control_failed"


class PackRefusedError(ValidationError):
    """``script push``: the local file or directory cannot be packed (a symlink, a special
    file, a name the checker refuses, unreadable, too large, or no such path); exit 2,
    nothing was sent. ``path`` is what the user gave; the message names the offending
    entry relative to it (the user's own file, shown to that user only)."""

    code = "bundle_pack_refused"

    def __init__(self, path: str, cause: PackError) -> None:
        said = str(cause)  # "cannot read 'PATH' (…)" names the path itself
        QinglongError.__init__(self, f"cannot push: {said}" if said.startswith("cannot read")
                               else f"cannot push {path}: {said}")
        self.field = "PATH"
        self.entry = cause.path
