"""Wire types between a worker and control (docs/protocols.md §4.2): one definition for both sides.

Every message is a frozen dataclass with ``to_json() -> dict`` and a strict
``from_json(dict)`` that raises ``WireFormatError`` (a ValidationError naming the field, never
echoing the value) on a missing field, an unknown field, a wrong type or a bad id. Times the
worker measures are milliseconds; times control decides (lease expiry) stay on the database
clock and travel as durations (``lease_ms``), never as instants, because the two clocks differ.

HTTP routes (all JSON, bearer token of a worker pool; the (attempt id, lease token, lease
version) triple fences every write after the claim — a mismatch is 409 ``lease_lost``):

- ``POST /v1/worker/register``           WorkerRegistration -> WorkerRegistered
- ``POST /v1/worker/claim``              ClaimRequest -> ClaimAnswer
- ``POST /v1/worker/started``            StartedReport -> Ack
- ``POST /v1/worker/heartbeat``          HeartbeatReport -> HeartbeatAnswer
- ``POST /v1/worker/log-upload``         LogUploadRequest -> LogUploadGrant
- ``POST /v1/worker/bundle``             BundleRequest -> BundleGrant (a presigned GET)
- ``POST /v1/worker/log-chunk``          LogChunkBatch -> LogChunkAnswer (live log, §4.9)
- ``POST /v1/worker/complete``           CompletionReport -> Ack
- ``POST /v1/worker/complete-no-output`` CompletionReport -> Ack (empty output, no object put;
  ``QL3-Wire: 2`` workers; an older replica answers 404)
- ``POST /v1/worker/stopped``            WorkerStopped -> Ack (drain finished)
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import validate_uuid7

T = TypeVar("T", bound="_Wire")

OUTCOMES = ("succeeded", "failed", "timed_out", "cancelled")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
MAX_CLAIM = 64
# A worker that decodes this release's additions to ClaimedAttempt (``secret_names``) says so
# with ``QL3-Wire: 2`` on its claim; control sends them only then (docs/protocols.md §4.2).
WIRE_HEADER = "QL3-Wire"
WIRE_VERSION = 2
# A waiting claim (docs/protocols.md §4.2 "Claims that wait"): a worker sending
# ``QL3-Wire: 2`` may add ``QL3-Claim-Wait: <ms>``, the longest it lets an empty claim wait
# for work; control waits at most min(that, 25 s, lease/3) and names the wait it allowed in
# the same header of its answer. Without the header in the answer (an older control, or a
# draining replica) the worker keeps its idle poll between claims.
CLAIM_WAIT_HEADER = "QL3-Claim-Wait"
CLAIM_WAIT_MAX_MS = 25_000
MAX_LOG_BYTES = 5 * 1024**3  # S3's limit for one PUT: a presigned upload is one PUT
_CONTENT_TYPE = re.compile(r"^[\x20-\x7e]{1,128}$")  # one HTTP header value, ASCII


class WireFormatError(ValidationError):
    """A message that does not match its wire type; names the field only (never the value)."""


def _check(ok: bool, name: str, why: str) -> None:
    if not ok:
        raise WireFormatError(name, why)


def check_labels(labels: Any, name: str = "labels") -> dict[str, str]:
    """``labels`` as ``{key: value}`` of short identifiers (``[A-Za-z0-9][A-Za-z0-9_.-]*``,
    at most 63 characters, at most 32 pairs); WireFormatError otherwise."""
    _check(isinstance(labels, dict) and len(labels) <= 32, name, "must be an object of ≤ 32 labels")
    for key, value in labels.items():
        _check(isinstance(key, str) and bool(_LABEL.match(key)), name, "bad label key")
        _check(isinstance(value, str) and bool(_LABEL.match(value)), name, "bad label value")
    return dict(labels)


@dataclass(frozen=True)
class _Wire:
    """Base: generic strict decoding of flat dataclasses with JSON-typed fields."""

    _uuid7_fields: ClassVar[tuple[str, ...]] = ()

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls: type[T], data: Any) -> T:
        _check(isinstance(data, dict), cls.__name__, "must be a JSON object")
        hints, fields = _shape(cls)
        unknown = set(data) - set(fields)
        _check(not unknown, cls.__name__, "has unknown fields")
        values: dict[str, Any] = {}
        for name, f in fields.items():
            if name not in data:
                has_default = (f.default is not dataclasses.MISSING
                               or f.default_factory is not dataclasses.MISSING)
                _check(has_default, name, "is required")
                continue
            values[name] = _decode(hints[name], data[name], name)
        obj = cls(**values)
        obj.validate()
        return obj

    def validate(self) -> None:
        """Checks beyond types (ranges, id formats); WireFormatError naming the field."""
        for name in self._uuid7_fields:
            value = getattr(self, name)
            if value is not None:
                try:
                    validate_uuid7(value)
                except ValidationError:
                    raise WireFormatError(name, "must be a UUIDv7") from None


_Shape = tuple[dict[str, Any], dict[str, "dataclasses.Field[Any]"]]
_SHAPES: dict[type, _Shape] = {}


def _shape(cls: type) -> _Shape:
    """(type hints, fields by name) of a wire class, resolved once per class: resolving the
    hints evaluates every annotation string, the costliest step of a decode. Two threads
    may both resolve a class the first time; they store equal values."""
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)}
        _SHAPES[cls] = shape
    return shape


def _decode(hint: Any, value: Any, name: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            _check(type(None) in args, name, "must not be null")
            return None
        inner = [a for a in args if a is not type(None)]
        return _decode(inner[0], value, name)
    if origin is list:
        _check(isinstance(value, list), name, "must be a list")
        return [_decode(args[0], v, name) for v in value]
    if origin is dict:
        _check(isinstance(value, dict), name, "must be an object")
        return {str(k): _decode(args[1], v, name) for k, v in value.items()}
    if isinstance(hint, type) and issubclass(hint, _Wire):
        return hint.from_json(value)
    if hint is bool:
        _check(isinstance(value, bool), name, "must be a boolean")
    elif hint is int:
        _check(isinstance(value, int) and not isinstance(value, bool), name, "must be an integer")
    elif hint is str:
        _check(isinstance(value, str), name, "must be a string")
    return value


@dataclass(frozen=True)
class LeaseRef(_Wire):
    """The fence every write after a claim carries: (attempt id, lease token, lease version)."""

    attempt_id: str
    lease_token: str
    lease_version: int
    _uuid7_fields: ClassVar[tuple[str, ...]] = ("attempt_id",)

    def validate(self) -> None:
        super().validate()
        _check(bool(_UUID.match(self.lease_token)), "lease_token", "must be a UUID")
        _check(self.lease_version >= 1, "lease_version", "must be ≥ 1")


@dataclass(frozen=True)
class WorkerRegistration(_Wire):
    """A worker process announcing itself: ``name`` (reusable, e.g. a pod name), the labels
    it declares (bounded by its pool's), and how many attempts it runs at once."""

    name: str
    labels: dict[str, str]
    concurrency: int

    def validate(self) -> None:
        _check(bool(_LABEL.match(self.name)), "name", "must be 1–63 of [A-Za-z0-9_.-]")
        check_labels(self.labels)
        _check(1 <= self.concurrency <= 1024, "concurrency", "must be 1–1024")


@dataclass(frozen=True)
class WorkerRegistered(_Wire):
    """Control's answer: this process's new incarnation id and the lease timing it enforces
    (``heartbeat_ms`` ≤ ``lease_ms`` / 3, C11)."""

    incarnation_id: str
    lease_ms: int
    heartbeat_ms: int
    _uuid7_fields: ClassVar[tuple[str, ...]] = ("incarnation_id",)

    def validate(self) -> None:
        super().validate()
        check_lease_timing(self.lease_ms, self.heartbeat_ms)


def check_lease_timing(lease_ms: int, heartbeat_ms: int) -> None:
    """WireFormatError unless ``0 < heartbeat_ms`` and ``3 * heartbeat_ms ≤ lease_ms``
    (docs/protocols.md §4.2, case C11); the message holds both numbers."""
    _check(lease_ms > 0 and heartbeat_ms > 0 and heartbeat_ms * 3 <= lease_ms, "heartbeat_ms",
           f"heartbeat {heartbeat_ms} ms must be positive and at most a third of the lease "
           f"{lease_ms} ms")


@dataclass(frozen=True)
class ClaimRequest(_Wire):
    """Ask for up to ``max_attempts`` (1–64) queued attempts for this incarnation."""

    incarnation_id: str
    max_attempts: int
    _uuid7_fields: ClassVar[tuple[str, ...]] = ("incarnation_id",)

    def validate(self) -> None:
        super().validate()
        _check(1 <= self.max_attempts <= MAX_CLAIM, "max_attempts", f"must be 1–{MAX_CLAIM}")


@dataclass(frozen=True)
class ClaimedAttempt(_Wire):
    """One attempt leased to the worker, with everything it needs to run it.

    At most one of ``argv`` / ``shell``, and exactly one unless the attempt runs a script
    bundle: ``bundle_digest`` (hex SHA-256 of the bundle) with ``entry_point`` (a relative
    path inside it; both or neither) — the command then runs in the extracted bundle, and
    with neither argv nor shell the entry point itself is run (docs/protocols.md §4.7).
    ``env`` is the task's full environment (secrets included: the worker is trusted with
    them and never logs them); ``secret_names`` the names in ``env`` whose values are secret
    (the worker masks their values in the attempt's output: docs/operations.md §9), sent
    only to a worker that claims with ``QL3-Wire: 2`` (WIRE_HEADER) and left out of the JSON
    when empty, so an older worker's strict decoder never sees the field; ``timeout_ms``
    None means none; ``log_limit_bytes`` caps the spool."""

    lease: LeaseRef
    run_id: str
    task_id: str
    task_name: str
    run_number: int
    attempt_number: int
    argv: list[str] | None
    shell: str | None
    env: dict[str, str]
    cwd: str | None
    timeout_ms: int | None
    log_limit_bytes: int
    lease_ms: int
    heartbeat_ms: int
    bundle_digest: str | None = None
    entry_point: str | None = None
    secret_names: list[str] = field(default_factory=list)
    _uuid7_fields: ClassVar[tuple[str, ...]] = ("run_id", "task_id")

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        if not self.secret_names:
            del data["secret_names"]  # what a worker without WIRE_HEADER version 2 decodes
        return data

    def validate(self) -> None:
        super().validate()
        _check(self.argv is None or self.shell is None, "argv", "at most one of argv, shell")
        _check((self.bundle_digest is None) == (self.entry_point is None), "entry_point",
               "bundle_digest and entry_point go together")
        _check(self.bundle_digest is not None or self.argv is not None
               or self.shell is not None, "argv", "exactly one of argv, shell")
        if self.argv is not None:
            _check(bool(self.argv), "argv", "must not be empty")
        _check(self.timeout_ms is None or self.timeout_ms > 0, "timeout_ms", "must be > 0")
        _check(self.log_limit_bytes > 0, "log_limit_bytes", "must be > 0")
        check_lease_timing(self.lease_ms, self.heartbeat_ms)
        if self.bundle_digest is not None:
            _check(bool(_HEX64.match(self.bundle_digest)), "bundle_digest", "must be hex SHA-256")
        if self.entry_point is not None:
            _check(_relative_path(self.entry_point), "entry_point",
                   "must be a relative path inside the bundle")


def _relative_path(path: str) -> bool:
    """A normalized relative path: no leading ``/``, no empty, ``.`` or ``..`` component,
    no control character, at most 1024 characters."""
    parts = path.split("/")
    return (0 < len(path) <= 1024 and not any(p in ("", ".", "..") for p in parts)
            and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in path))


@dataclass(frozen=True)
class BundleRequest(_Wire):
    """Ask for a presigned GET of the bundle ``digest`` that the leased attempt runs."""

    lease: LeaseRef
    digest: str

    def validate(self) -> None:
        _check(bool(_HEX64.match(self.digest)), "digest", "must be hex SHA-256")


@dataclass(frozen=True)
class BundleGrant(_Wire):
    """A presigned GET of the bundle: fetch ``url`` (no other header, never the worker's
    token) before ``expires_in_s`` seconds; the body must be exactly ``size_bytes`` bytes
    whose SHA-256 is ``digest`` — the worker verifies both and refuses anything else."""

    digest: str
    url: str
    size_bytes: int
    expires_in_s: int

    def validate(self) -> None:
        _check(bool(_HEX64.match(self.digest)), "digest", "must be hex SHA-256")
        _check(self.url.startswith(("http://", "https://")), "url", "must be http(s)")
        _check(0 < self.size_bytes <= 1024**3, "size_bytes", "must be 1 byte – 1 GiB")
        _check(0 < self.expires_in_s <= 604_800, "expires_in_s", "must be 1–604800")


@dataclass(frozen=True)
class ClaimAnswer(_Wire):
    attempts: list[ClaimedAttempt] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"attempts": [a.to_json() for a in self.attempts]}


@dataclass(frozen=True)
class StartedReport(_Wire):
    """The attempt's process group is running (``pid`` of its leader, for the record)."""

    lease: LeaseRef
    pid: int


@dataclass(frozen=True)
class HeartbeatReport(_Wire):
    lease: LeaseRef


@dataclass(frozen=True)
class HeartbeatAnswer(_Wire):
    """The lease was extended by ``lease_ms`` from the database's now; ``cancel`` asks the
    worker to stop the attempt (it then completes it as ``cancelled``)."""

    cancel: bool
    lease_ms: int


@dataclass(frozen=True)
class LogFacts(_Wire):
    """What the worker claims about the log object it uploaded (or will upload)."""

    sha256: str
    size_bytes: int
    content_type: str = "text/plain; charset=utf-8"

    def validate(self) -> None:
        _check(bool(_HEX64.match(self.sha256)), "sha256", "must be hex SHA-256")
        _check(0 <= self.size_bytes <= MAX_LOG_BYTES, "size_bytes",
               f"must be 0–{MAX_LOG_BYTES} (one PUT)")
        _check(bool(_CONTENT_TYPE.match(self.content_type)), "content_type",
               "must be 1–128 printable ASCII characters (an HTTP header value)")


@dataclass(frozen=True)
class LogUploadRequest(_Wire):
    lease: LeaseRef
    log: LogFacts


@dataclass(frozen=True)
class LogUploadGrant(_Wire):
    """A presigned PUT: send exactly these headers (metadata, checksum, content type and
    length are signed) to ``url`` with method PUT before ``expires_in_s`` seconds."""

    url: str
    headers: dict[str, str]
    object_key: str
    expires_in_s: int


MAX_CHUNK_BYTES = 64 * 1024
_B64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")


@dataclass(frozen=True)
class LogChunk(_Wire):
    """Raw output bytes ``[offset, offset + len(bytes))`` of one attempt (docs/protocols.md
    §4.9). Offsets count the task's raw output bytes, before any cap or mask. ``data`` is the
    base64 of at most MAX_CHUNK_BYTES bytes (empty is allowed, e.g. to record a gap at the
    end). ``offset`` must equal control's stored end, unless ``skipped`` is true: then it may
    lie past the end and control records the bytes in between as a gap (output that was not
    streamed live; the final object still holds it)."""

    lease: LeaseRef
    offset: int
    data: str
    skipped: bool = False

    def validate(self) -> None:
        _check(0 <= self.offset <= MAX_LOG_BYTES * 64, "offset", "must be a byte offset ≥ 0")
        _check(len(self.data) % 4 == 0 and bool(_B64.match(self.data))
               and self.size_bytes <= MAX_CHUNK_BYTES, "data",
               f"must be base64 of ≤ {MAX_CHUNK_BYTES} bytes")

    @property
    def size_bytes(self) -> int:
        """The decoded length of ``data`` in bytes (computed from the base64 text)."""
        return len(self.data) // 4 * 3 - (len(self.data) - len(self.data.rstrip("=")))


@dataclass(frozen=True)
class LogChunkBatch(_Wire):
    """Every pending chunk of one worker's attempts, in one request (at most MAX_CLAIM
    chunks; at most one chunk per attempt is typical, more are applied in order)."""

    chunks: list[LogChunk]

    def validate(self) -> None:
        _check(1 <= len(self.chunks) <= MAX_CLAIM, "chunks", f"must hold 1–{MAX_CLAIM} chunks")


@dataclass(frozen=True)
class LogChunkResult(_Wire):
    """One chunk's answer, in the order of the batch. ``status``: 200 stored (``replayed``
    true when the range had already been acknowledged: answered as the first time), 409 the
    lease is stale (nothing stored; handled like a 409 on a heartbeat), 416 ``offset`` is not
    the stored end (nothing stored; resend from ``end``). ``end`` is the stored end after the
    chunk: the next raw offset control wants (None with 409)."""

    attempt_id: str
    status: int
    end: int | None
    replayed: bool = False

    def validate(self) -> None:
        _check(self.status in (200, 409, 416), "status", "must be 200, 409 or 416")


@dataclass(frozen=True)
class LogChunkAnswer(_Wire):
    """``results`` one per chunk, in order; ``flush_ms`` how long the worker should wait
    after new output before its next send (control may ask chatty workers to slow down)."""

    results: list[LogChunkResult]
    flush_ms: int = 1000


@dataclass(frozen=True)
class LogLayout(_Wire):
    """How the stored log maps to raw offsets when the output cap was reached
    (docs/protocols.md §4.2 "Caps (worker)"): the object holds raw bytes
    ``[0, head_bytes)``, one marker line, then raw bytes ``[tail_offset, raw_bytes)``.
    Absent when nothing was cut (the object is the raw output, byte for byte)."""

    raw_bytes: int
    head_bytes: int
    tail_offset: int

    def validate(self) -> None:
        _check(0 <= self.head_bytes <= self.tail_offset <= self.raw_bytes, "tail_offset",
               "must satisfy 0 ≤ head_bytes ≤ tail_offset ≤ raw_bytes")


@dataclass(frozen=True)
class CompletionReport(_Wire):
    """The attempt ended. ``outcome`` one of OUTCOMES; ``exit_code`` (0–255) or ``signal``
    (1–255) as the wrapper saw them (a POSIX wait status holds nothing wider); ``log`` the
    uploaded object's facts, or None when no log was uploaded (control records the attempt
    without an artifact)."""

    lease: LeaseRef
    outcome: str
    exit_code: int | None
    signal: int | None
    log: LogFacts | None
    reason: str | None = None
    layout: LogLayout | None = None

    def to_json(self) -> dict[str, Any]:
        """As the base, but ``layout`` is left out when None, so a replica of the release
        before live logs (whose strict decoder refuses unknown fields) still accepts it."""
        data = super().to_json()
        if data.get("layout") is None:
            data.pop("layout", None)
        return data

    def validate(self) -> None:
        _check(self.outcome in OUTCOMES, "outcome", f"must be one of {', '.join(OUTCOMES)}")
        _check(self.exit_code is None or 0 <= self.exit_code <= 255, "exit_code",
               "must be 0–255")
        _check(self.signal is None or 1 <= self.signal <= 255, "signal", "must be 1–255")
        if self.reason is not None:
            _check(bool(re.match(r"^[a-z_]{1,40}$", self.reason)), "reason", "must be a class name")


@dataclass(frozen=True)
class Ack(_Wire):
    """``replayed`` is true when the write had already been applied (its first response was
    lost): the answer is the same, never a 409."""

    ok: bool = True
    replayed: bool = False


@dataclass(frozen=True)
class WorkerStopped(_Wire):
    incarnation_id: str
    _uuid7_fields: ClassVar[tuple[str, ...]] = ("incarnation_id",)
