"""Launch request, launcher configuration and step-1 validation (ADR-0069 §2 step 1).

Every check runs before anything touches the disk or spawns a process. Error messages name
the field and the rule, never the offending value (it may be a secret).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from qinglong.local.process.paths import check_absolute
from qinglong.shared import output_mask
from qinglong.shared.errors import ValidationError
from qinglong.shared.ids import validate_uuid7

DEFAULT_WRAPPER_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "wrapper.pyw")
# What the wrapper compiles when the output goes through a pipe, in this order (wrapper.pyw)
OUTPUT_MASK_PATH = os.path.abspath(output_mask.__file__)
LOG_CAP_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log_cap.py")
WRAPPER_MAX_BYTES = 64 * 1024
LAUNCH_MAX_BYTES = 256 * 1024
# Linux MAX_ARG_STRLEN: one argv string or one NAME=value entry, NUL included.
SINGLE_STRING_MAX_BYTES = 32 * 4096
RESERVED_ENV_PREFIXES = ("QL3_RECEIPT_", "QL3_LAUNCH_")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LaunchLimitError(ValidationError):
    """A launch exceeds a byte limit. ``limit`` names which one.

    ``"argv_env_bytes"``: argv plus environment over the configured budget;
    ``"single_string_bytes"``: one argument or ``NAME=value`` over the kernel's 128 KiB.
    """

    code = "launch_limit_exceeded"

    def __init__(self, limit: str, max_bytes: int) -> None:
        super().__init__("argv+env", f"{limit} exceeds {max_bytes} bytes")
        self.limit = limit
        self.max_bytes = max_bytes


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """One attempt to start.

    ``argv``: the user command (argv[0] searched on the env's PATH); ``env``: the complete
    user environment, already composed by the caller (nothing else leaks in); ``cwd``: an
    existing absolute directory; ``output_path``: absolute, normalised, inside the log root;
    ``secret_names``: the names in ``env`` whose values are secrets (masked in the log,
    docs/operations.md "Secrets in output").
    """

    run_id: str
    attempt_id: str
    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    output_path: str
    secret_names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """Launcher settings. Sizes are bytes; paths absolute.

    ``python``: interpreter that runs the wrapper (``-I -S``); ``wrapper_path``: the bundled
    wrapper script, verified against ``WRAPPER_SHA256`` on every launch; ``log_cap_bytes``:
    the most output one attempt keeps (the wrapper cuts the log with a marker line).
    """

    log_root: str
    receipt_root: str
    python: str = field(default_factory=lambda: sys.executable)
    wrapper_path: str = DEFAULT_WRAPPER_PATH
    wrapper_max_bytes: int = WRAPPER_MAX_BYTES
    launch_max_bytes: int = LAUNCH_MAX_BYTES
    log_cap_bytes: int = 0  # 0: no cap (the command writes the log directly)

    def __post_init__(self) -> None:
        check_absolute(self.log_root, "log_root")
        check_absolute(self.receipt_root, "receipt_root")
        check_absolute(self.wrapper_path, "wrapper_path")
        if not isinstance(self.python, str) or not os.path.isabs(self.python):
            raise ValidationError("python", "must be an absolute interpreter path")
        if type(self.log_cap_bytes) is not int or self.log_cap_bytes < 0:
            raise ValidationError("log_cap_bytes", "must be a non-negative integer")
        for name in ("wrapper_max_bytes", "launch_max_bytes"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise ValidationError(name, "must be a positive integer")


def _encoded(text: str, what: str) -> bytes:
    if "\0" in text:
        raise ValidationError(what, "must not contain NUL")
    try:
        return os.fsencode(text)
    except UnicodeError:
        raise ValidationError(what, "is not encodable for the operating system") from None


def validate_request(request: LaunchRequest, config: LaunchConfig) -> None:
    """ADR-0069 §2 step 1: check ids, argv, env, cwd, output path and the byte budget.

    Raises:
        InvalidIdentifierError: run or attempt id is not a UUIDv7.
        LaunchLimitError: a byte limit is exceeded (``limit`` names it).
        ValidationError: any other rule (``field`` names the field).
    """
    validate_uuid7(request.run_id, "run_id")
    validate_uuid7(request.attempt_id, "attempt_id")
    argv = request.argv
    if not isinstance(argv, tuple | list) or not argv:
        raise ValidationError("argv", "must be a non-empty sequence of strings")
    total = 0
    for arg in argv:
        if not isinstance(arg, str):
            raise ValidationError("argv", "must be a non-empty sequence of strings")
        size = len(_encoded(arg, "argv")) + 1
        if size > SINGLE_STRING_MAX_BYTES:
            raise LaunchLimitError("single_string_bytes", SINGLE_STRING_MAX_BYTES)
        total += size
    if not argv[0]:
        raise ValidationError("argv", "the command name must not be empty")
    if not isinstance(request.env, Mapping):
        raise ValidationError("env", "must be a mapping of strings")
    for name, value in request.env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise ValidationError("env", "variable names must match [A-Za-z_][A-Za-z0-9_]*")
        if name.startswith(RESERVED_ENV_PREFIXES):
            raise ValidationError("env", "QL3_RECEIPT_* and QL3_LAUNCH_* names are reserved")
        if not isinstance(value, str):
            raise ValidationError("env", "values must be strings")
        size = len(name) + len(_encoded(value, "env")) + 2
        if size > SINGLE_STRING_MAX_BYTES:
            raise LaunchLimitError("single_string_bytes", SINGLE_STRING_MAX_BYTES)
        total += size
    if any(name not in request.env for name in request.secret_names):
        raise ValidationError("secret_names", "must name variables of env")
    total += sum(len(name) + 1 for name in request.secret_names)
    if total > config.launch_max_bytes:
        raise LaunchLimitError("argv_env_bytes", config.launch_max_bytes)
    cwd = request.cwd
    if not isinstance(cwd, str) or "\0" in cwd or not os.path.isabs(cwd):
        raise ValidationError("cwd", "must be an absolute path")
    if not os.path.isdir(cwd):  # named: a task's directory deleted since it was added
        raise ValidationError("cwd", f"the working directory '{cwd}' must be an existing "
                                     "directory (it is missing or not a directory)")
    output = check_absolute(request.output_path, "output_path")
    if os.path.commonpath((config.log_root, output)) != config.log_root or output == (
        config.log_root
    ):
        raise ValidationError("output_path", "must be inside the log root")
