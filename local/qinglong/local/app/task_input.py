"""Validation of a task definition before anything is stored (bad input changes nothing)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from qinglong.local.process.launch_request import LAUNCH_MAX_BYTES, SINGLE_STRING_MAX_BYTES
from qinglong.shared.cron import parse_schedule
from qinglong.shared.domain import ConcurrencyPolicy, Task
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import uuid7
from qinglong.shared.names import check_free_labels, check_name

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_ENV = ("QL3_RECEIPT_", "QL3_LAUNCH_")
MAX_ATTEMPTS = 100
MAX_TIMEOUT_S = 30 * 24 * 3600
# Room left for PATH, HOME, LANG and the global variables within the launcher's budget.
LAUNCH_BUDGET_BYTES = LAUNCH_MAX_BYTES - 32 * 1024


@dataclass(frozen=True, slots=True)
class TaskInput:
    """What ``ql3 local task add`` collects; :meth:`to_task` validates it."""

    name: str
    argv: tuple[str, ...]
    schedule: str
    timezone: str = "UTC"
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    timeout_s: float | None = None
    max_attempts: int = 1
    concurrency: str = "forbid"
    labels: tuple[str, ...] = ()
    misfire_grace_s: int = 60

    def to_task(self) -> Task:
        """A new Task with a fresh UUIDv7 id.

        Raises:
            ValidationError: naming the field (name, schedule, timezone, argv, env, cwd,
                timeout, max_attempts, concurrency, misfire_grace, labels).
        """
        name = check_name(self.name)
        labels = check_free_labels(self.labels)
        parse_schedule(self.schedule, self.timezone)
        validate_argv(self.argv)
        validate_env(self.env)
        check_launch_budget(tuple(self.argv), self.env)
        if self.timezone == "":
            raise ValidationError("timezone", "must not be empty")
        if self.cwd is not None:
            if not os.path.isabs(self.cwd):
                raise ValidationError("cwd", "must be an absolute path")
            if not os.path.isdir(self.cwd):
                raise ValidationError("cwd", f"'{self.cwd}' must be an existing directory")
        if self.timeout_s is not None and not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            raise ValidationError("timeout", "must be more than 0 s and at most 30 days")
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS:
            raise ValidationError("max_attempts", "must be between 1 and 100")
        try:
            policy = ConcurrencyPolicy(self.concurrency)
        except ValueError:
            raise ValidationError("concurrency", "must be forbid, allow or replace") from None
        if not 0 <= self.misfire_grace_s <= 7 * 24 * 3600:
            raise ValidationError("misfire_grace", "must be between 0 s and 7 days")
        return Task(
            id=uuid7(),
            name=name,
            argv=tuple(self.argv),
            schedule=self.schedule,
            timezone=self.timezone,
            env=dict(self.env),
            cwd=self.cwd,
            timeout_s=self.timeout_s,
            max_attempts=self.max_attempts,
            concurrency=policy,
            labels=labels,
            misfire_grace_s=self.misfire_grace_s,
        )


def validate_argv(argv: object) -> tuple[str, ...]:
    """A non-empty sequence of strings without NUL. Raises ValidationError("argv", ...)."""
    if not isinstance(argv, list | tuple) or not argv:
        raise ValidationError("argv", "the command must not be empty")
    for item in argv:
        if not isinstance(item, str) or "\x00" in item:
            raise ValidationError("argv", "arguments must be strings without NUL bytes")
    if not argv[0].strip():
        raise ValidationError("argv", "the command name must not be blank")
    return tuple(argv)


def check_launch_budget(argv: tuple[str, ...], env: dict[str, str]) -> None:
    """The launcher's byte limits (ADR-0069 §2 step 1), checked when the task is added so a
    task that could never start is refused. Raises ValidationError naming the limit."""
    total = 0
    for text in (*argv, *(f"{k}={v}" for k, v in env.items())):
        size = len(text.encode("utf-8", "surrogateescape")) + 1
        if size > SINGLE_STRING_MAX_BYTES:
            raise ValidationError("argv", f"one argument or variable exceeds "
                                          f"{SINGLE_STRING_MAX_BYTES} bytes")
        total += size
    if total > LAUNCH_BUDGET_BYTES:
        raise ValidationError("argv", f"command and environment exceed {LAUNCH_BUDGET_BYTES} bytes")


def validate_env(env: object) -> dict[str, str]:
    """Names ``[A-Za-z_][A-Za-z0-9_]*`` not starting ``QL3_RECEIPT_``/``QL3_LAUNCH_``, values
    without NUL. Raises ValidationError("env", ...) that never echoes a value."""
    if not isinstance(env, dict):
        raise ValidationError("env", "must be a mapping of names to values")
    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValidationError("env", "names must match [A-Za-z_][A-Za-z0-9_]*")
        if name.startswith(_RESERVED_ENV):
            raise ValidationError("env", "names starting QL3_RECEIPT_ or QL3_LAUNCH_ are reserved")
        if not isinstance(value, str) or "\x00" in value:
            raise ValidationError("env", "values must be strings without NUL bytes")
    return dict(env)
