"""Request and response models of the task routes (docs/architecture.md §2 Task; docs/protocols.md
§4.5; issue 11 item 7).

Ranges are the schema's (migration 0005): ``max_attempts`` 1..100, ``timeout_s`` ≥ 1,
backoffs and grace ≥ 0 (PostgreSQL ``integer``), ``log_limit_bytes`` ≥ 1 and
``log_retention_s`` 0..``MAX_LOG_RETENTION_S`` (a century: the column is ``bigint``, but
``finished_at`` + retention must stay a PostgreSQL timestamp, or the completion that enrolls
the log fails). Types are strict: a number given as a string (``"timeout_s": "5"``) or a
boolean as a number is refused. Text never holds NUL or lone surrogates (PostgreSQL
cannot store them): refused as 422 like any other invalid field. Env names match
``[A-Za-z_][A-Za-z0-9_]*``; task names and label values follow ``shared/names.py`` (any
script's letters and digits, NFC), label keys stay ASCII. Exactly one
of ``argv`` and ``shell`` (a task created by this API always has a command) — unless the task
runs a script bundle (``bundle_digest`` with ``entry_point``, docs/protocols.md §4.7): then
at most one, none meaning "run the entry point", and no ``cwd``. Secret env values are
write-only: answers carry ``{"secret": true, "value": null}``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from qinglong.shared.names import NAME_RULE, check_name, is_valid_name

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_LOG_RETENTION_S = 100 * 366 * 86_400  # a century; far below timestamp overflow
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_PLAIN = r"^[^\x00]*$"


def _storable(value: str) -> str:
    """Refuse text PostgreSQL cannot store (NUL, lone surrogates); never echoes the value."""
    if "\x00" in value:
        raise ValueError("contains NUL")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode") from None
    return value


def _task_name(value: str) -> str:
    """A task name or label value by ``shared/names.py``'s rule, NFC-normalized."""
    if not is_valid_name(value):
        raise ValueError(NAME_RULE)
    return check_name(value)


# no length constraint of pydantic's own: one rule, one message (NAME_RULE's 1-128
# characters) for every bad name, however long (the request body is size-limited)
TaskName = Annotated[str, AfterValidator(_task_name)]
LabelValue = Annotated[str, AfterValidator(_task_name)]
EnvName = Annotated[str, StringConstraints(pattern=ENV_NAME_PATTERN)]
LabelText = Annotated[str, StringConstraints(pattern=LABEL_PATTERN)]
ArgText = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=_PLAIN),
                    AfterValidator(_storable)]
ShellText = Annotated[str, StringConstraints(min_length=1, max_length=65536, pattern=_PLAIN),
                      AfterValidator(_storable)]
EnvText = Annotated[str, StringConstraints(min_length=0, max_length=32768, pattern=_PLAIN),
                    AfterValidator(_storable)]
PathText = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=_PLAIN),
                     AfterValidator(_storable)]
ScheduleText = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=_PLAIN),
                         AfterValidator(_storable)]
ZoneText = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=_PLAIN),
                     AfterValidator(_storable)]
Policy = Literal["forbid", "allow", "replace"]
BundleDigest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
EntryPointText = Annotated[str, StringConstraints(min_length=1, max_length=1024, pattern=_PLAIN),
                           AfterValidator(_storable)]


class EnvValueIn(BaseModel):
    """One env entry as written: ``value`` and whether it is ``secret`` (write-only)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    value: EnvText
    secret: bool = False


class EnvValuePatch(BaseModel):
    """One env entry in an edit: ``value`` null keeps the current value of an existing
    entry (how a client that cannot read a secret keeps it)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    value: EnvText | None = None
    secret: bool = False


class EnvValueOut(BaseModel):
    """One env entry as answered: ``value`` is null when ``secret``."""

    value: str | None
    secret: bool


_EXAMPLE: dict[str, Any] = {
    "name": "nightly", "argv": ["/bin/echo", "hello"], "schedule": "*/5 * * * *",
    "timezone": "Asia/Shanghai", "env": {"TOKEN": {"value": "s3cr3t", "secret": True}},
    "labels": {"zone": "a"}, "max_attempts": 2}


class TaskCreate(BaseModel):
    """``POST /v1/tasks``: a new task. ``schedule`` null: manual runs only. The task's zone
    is ``timezone`` when given, else control's ``--default-timezone`` when set, else
    ``caller_timezone`` (the zone of the machine the client runs on, sent by ``ql3
    cluster task add``), else UTC; ``caller_timezone`` itself is not stored."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"examples": [_EXAMPLE]})
    name: TaskName
    argv: Annotated[list[ArgText], Field(min_length=1, max_length=256)] | None = None
    shell: ShellText | None = None
    schedule: ScheduleText | None = None
    timezone: ZoneText | None = None
    caller_timezone: ZoneText | None = None
    env: Annotated[dict[EnvName, EnvValueIn], Field(max_length=256)] = Field(
        default_factory=dict)
    cwd: PathText | None = None
    timeout_s: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 1
    retry_backoff_ms: Annotated[int, Field(ge=0, le=INT32_MAX)] = 10_000
    retry_backoff_cap_ms: Annotated[int, Field(ge=0, le=INT32_MAX)] = 600_000
    concurrency_policy: Policy = "forbid"
    catchup_grace_s: Annotated[int, Field(ge=0, le=INT32_MAX)] = 60
    labels: Annotated[dict[LabelText, LabelValue], Field(max_length=32)] = Field(
        default_factory=dict)
    log_limit_bytes: Annotated[int, Field(ge=1, le=INT64_MAX)] = 16 * 1024 * 1024
    log_retention_s: Annotated[int, Field(ge=0, le=MAX_LOG_RETENTION_S)] = 7 * 86_400
    enabled: bool = True
    bundle_digest: BundleDigest | None = None
    entry_point: EntryPointText | None = None


class TaskPatch(BaseModel):
    """``PATCH /v1/tasks/{name}``: only the fields present change. Setting ``argv`` clears
    ``shell`` and the reverse (giving both is refused); setting ``bundle_digest`` clears
    ``cwd``, clearing it clears ``entry_point``. ``env`` replaces the whole map;
    an entry with a null value keeps that entry's current value. Nullable in the answer
    means clearable here (``schedule``, ``cwd``, ``timeout_s``); null for any other field
    is refused. ``name`` renames the task (the rule of ``POST``; same id, runs, numbering
    and schedule). ``version``, when given, is the task's ``version`` as the client read
    it: the edit applies only if the task is still at it, else 409 ``task_changed``
    (docs/protocols.md §4.5 "Editing a task"); it is not stored."""

    model_config = ConfigDict(extra="forbid", strict=True,
                              json_schema_extra={"examples": [
                                  {"schedule": "0 3 * * *"},
                                  {"name": "京东签到", "version": 3}]})
    name: TaskName | None = None
    version: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = None
    argv: Annotated[list[ArgText], Field(min_length=1, max_length=256)] | None = None
    shell: ShellText | None = None
    schedule: ScheduleText | None = None
    timezone: ZoneText | None = None
    env: Annotated[dict[EnvName, EnvValuePatch], Field(max_length=256)] | None = None
    cwd: PathText | None = None
    timeout_s: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    max_attempts: Annotated[int, Field(ge=1, le=100)] | None = None
    retry_backoff_ms: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    retry_backoff_cap_ms: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    concurrency_policy: Policy | None = None
    catchup_grace_s: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    labels: Annotated[dict[LabelText, LabelValue], Field(max_length=32)] | None = None
    log_limit_bytes: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = None
    log_retention_s: Annotated[int, Field(ge=0, le=MAX_LOG_RETENTION_S)] | None = None
    enabled: bool | None = None
    bundle_digest: BundleDigest | None = None
    entry_point: EntryPointText | None = None


NULLABLE_ON_EDIT = frozenset({"argv", "shell", "schedule", "cwd", "timeout_s",
                              "bundle_digest", "entry_point"})


class TaskEventOut(BaseModel):
    """One history row: ``kind`` (created, edited, enabled, disabled, deleted,
    run_requested), ``detail`` (changed field names, the acting token's name; never a
    value), ``at``."""

    kind: str
    detail: dict[str, Any]
    at: datetime


class TaskOut(BaseModel):
    """A task as answered (secret env values never included)."""

    id: str
    name: str
    argv: list[str] | None
    shell: str | None
    schedule: str | None
    timezone: str
    env: dict[str, EnvValueOut]
    cwd: str | None
    timeout_s: int | None
    max_attempts: int
    retry_backoff_ms: int
    retry_backoff_cap_ms: int
    concurrency_policy: str
    catchup_grace_s: int
    labels: dict[str, str]
    log_limit_bytes: int
    log_retention_s: int
    enabled: bool
    bundle_digest: str | None
    entry_point: str | None
    next_fire_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime


class LastRunOut(BaseModel):
    """A task's newest run (by creation, whatever its status; issue 12 item 2): ``number``
    (``backup#42``), ``status``, ``finished_at`` (null while active) and ``duration_s``:
    seconds from its start to its end, or to now while active; null before it started."""

    id: str
    number: int | None
    status: str
    finished_at: datetime | None
    duration_s: float | None


class TaskItem(TaskOut):
    """A task as listed and shown: with its ``last_run`` (null: it never ran)."""

    last_run: LastRunOut | None


class TaskDetail(TaskItem):
    """A task with its last run and its latest history rows (newest first, at most 100)."""

    history: list[TaskEventOut]


class TaskPage(BaseModel):
    """A page of live tasks by name; ``next_cursor``: the name to pass as ``cursor``."""

    items: list[TaskItem]
    next_cursor: str | None


class OccurrenceOut(BaseModel):
    """One ledger row: consecutive slots ``first_slot``..``last_slot`` (``slot_count``) with
    one ``outcome``; ``run_id`` for ``run_created``."""

    id: str
    outcome: str
    first_slot: datetime
    last_slot: datetime
    slot_count: int
    run_id: str | None
    recorded_at: datetime


class OccurrencePage(BaseModel):
    """Newest first; ``next_cursor``: the last id, to pass as ``cursor``."""

    items: list[OccurrenceOut]
    next_cursor: str | None
