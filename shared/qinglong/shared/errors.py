"""Typed errors with stable names (docs/architecture.md §2; ADR names where they exist).

Messages never carry secrets, user output, commands or paths of user data: callers that
need details attach them as attributes, not as text.
"""

from __future__ import annotations


class QinglongError(Exception):
    """Base class of every error this runtime raises on purpose."""

    code: str = "qinglong_error"


class ValidationError(QinglongError, ValueError):
    """Input rejected before anything changed. ``field`` names what was wrong."""

    code = "invalid_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TimeZoneNotFoundError(ValidationError):
    """A time zone name this machine's tz database does not hold, or no tz database at all
    (the base install brings none: the system's, or the ``tzdata`` extra). ``zone`` is the
    name asked for."""

    code = "timezone_not_found"

    def __init__(self, zone: str, message: str) -> None:
        super().__init__("timezone", message)
        self.zone = zone


class InvalidIdentifierError(ValidationError):
    """A value that must be a UUIDv7 (version nibble 7, variant 10) is not one."""

    code = "invalid_identifier"


class InvalidTransitionError(QinglongError):
    """A status change not in the transition table (docs/architecture.md §2)."""

    code = "invalid_transition"

    def __init__(self, entity: str, current: str, target: str) -> None:
        super().__init__(f"{entity} cannot move from {current} to {target}")
        self.entity = entity
        self.current = current
        self.target = target


class ConcurrentUpdateError(QinglongError):
    """A compare-and-set lost its race: the row's status or version was not the expected one."""

    code = "concurrent_update"


class NotFoundError(QinglongError):
    """The named entity does not exist."""

    code = "not_found"


class ConflictError(QinglongError):
    """The request conflicts with existing state (duplicate name, conflicting registration)."""

    code = "conflict"


class AttemptLockHeldError(ConflictError):
    """A process of the attempt still holds its attempt lock, so the attempt cannot be
    settled by hand (docs/protocols.md §3.3, §3.4; issue 10 item 7). ``holders`` are the pids found
    holding the lock file (a /proc scan; it may find none, e.g. without the permission)."""

    code = "attempt_lock_held"

    def __init__(self, holders: list[int]) -> None:
        found = ", ".join(map(str, holders)) if holders else "none found"
        super().__init__(
            f"a process of this run still holds its attempt lock ({len(holders)} holder(s): "
            f"pids {found}); stop it first"
        )
        self.holders = list(holders)


class EvidenceUnreadableError(ConflictError):
    """The attempt's receipt or lock cannot be read safely, so its fate cannot be decided
    (issue 10 item 7). ``reason`` is a class (``unsafe_path``, ``not_a_file``,
    ``permission``, ``io_error``), never a path or file content."""

    code = "evidence_unreadable"

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(
            f"the attempt's {what} cannot be read safely ({reason}); repair the receipt "
            "directory of this attempt, then resolve again"
        )
        self.what = what
        self.reason = reason


class ReceiptCodecError(QinglongError):
    """A completion receipt is malformed, too large, or of an unknown format."""

    code = "receipt_invalid"


class HandleCodecError(QinglongError):
    """A durable process handle string does not parse (``ql3lp1:`` format)."""

    code = "handle_invalid"


class UnsafeSignalError(QinglongError):
    """Refused to signal a pid or process group id <= 1 (docs/protocols.md §3.2 step 6)."""

    code = "unsafe_signal"


class ProcessIdentityError(QinglongError):
    """The Linux identity of a spawned process could not be captured (ADR-0069 §2 step 6)."""

    code = "process_identity_unavailable"


class LaunchError(QinglongError):
    """A launch step failed before user code ran. ``step`` is the ADR-0069 §2 step number."""

    code = "launch_failed"

    def __init__(self, step: int, message: str) -> None:
        super().__init__(f"launch step {step}: {message}")
        self.step = step


class StorageError(QinglongError):
    """The local store failed (I/O, corruption, disk full)."""

    code = "storage_error"


class DiskFullError(StorageError):
    """The filesystem holding the data directory is full (ENOSPC or SQLITE_FULL)."""

    code = "disk_full"


class StorageClosedError(StorageError):
    """The store was closed; no further operation is accepted (docs/protocols.md §3.1 close
    fence)."""

    code = "storage_closed"


class StorageBusyError(StorageError):
    """The serial operation queue already holds 256 pending operations (docs/protocols.md §3.1)."""

    code = "storage_busy"


class SchemaMismatchError(StorageError):
    """Migrations changed, missing, or the database is newer than this code (docs/protocols.md
    §3.1)."""

    code = "schema_mismatch"


class DataDirectoryBusyError(QinglongError):
    """Another process owns the data directory (one owner per data directory)."""

    code = "data_directory_busy"


class LocalApplicationStartupRecoveryRequiredError(QinglongError):
    """Startup found runs whose fate is not yet proven (ADR-0067 §3, docs/protocols.md §3.4).

    Carries counts and the truncated flag only: no run ids, commands, paths or output.
    ``candidates``: runs left undecided by this pass (settled ones are not counted);
    ``active_attempts``: their attempts still active; ``truncated``: more candidates exist
    than one pass reads (256), so the counts are a lower bound (issue 10 item 7).
    """

    code = "startup_recovery_required"

    def __init__(self, candidates: int, active_attempts: int, truncated: bool) -> None:
        more = " or more" if truncated else ""
        super().__init__(
            f"startup recovery required: {candidates}{more} run(s) in dispatching/running "
            f"with {active_attempts}{more} active attempt(s) need a decision before new "
            "work starts"
        )
        self.candidates = candidates
        self.active_attempts = active_attempts
        self.truncated = truncated


class RunNotSucceededError(QinglongError):
    """A command waited for a run (``ql3 local run --wait``, ``ql3 cluster run --wait``,
    ``cancel --wait``) that ended other than it asked: exit 1, the line names the status."""

    code = "run_not_succeeded"
