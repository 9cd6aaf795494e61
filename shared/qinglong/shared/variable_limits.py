"""The size limits of environment variables a task is started with, shared by ``ql3 local``'s
global variables (``local/app/service.py``) and the cluster's (``control/db/variables.py``;
docs/protocols.md §4.5 "Global variables"). Stdlib only.

One ``NAME=value`` entry, NUL included, is at most :data:`VARIABLE_MAX_BYTES` (Linux
``MAX_ARG_STRLEN``, 128 KiB); all of them together at most a budget the caller gives (the
cluster: 1 MiB a pool; locally: the launcher's share for global variables).
"""

from __future__ import annotations

from collections.abc import Mapping

from qinglong.shared.errors import ValidationError

VARIABLE_MAX_BYTES = 32 * 4096  # Linux MAX_ARG_STRLEN: one NAME=value entry, NUL included


def entry_bytes(name: str, value: str) -> int:
    """Bytes ``NAME=value`` takes in a process's environment, its NUL included."""
    return len(f"{name}={value}".encode("utf-8", "surrogateescape")) + 1


def check_variables_size(env: Mapping[str, str], *, field: str, total_max_bytes: int,
                         total_what: str) -> None:
    """Refuse variables a task could not be started with: one ``NAME=value`` (``env``'s
    values as joined for the task) over VARIABLE_MAX_BYTES, or all of them over
    ``total_max_bytes`` (``total_what`` names them in the message, e.g. "global
    variables"). Raises ValidationError(``field``, ...) naming the variable and the limit,
    never a value."""
    total = 0
    for name, value in env.items():
        size = entry_bytes(name, value)
        if size > VARIABLE_MAX_BYTES:
            raise ValidationError(field, f"{name} would be {size} bytes with its enabled "
                                         f"values joined; one variable is limited to "
                                         f"{VARIABLE_MAX_BYTES} bytes")
        total += size
    if total > total_max_bytes:
        raise ValidationError(field, f"{total_what} are limited to {total_max_bytes} bytes "
                                     "in all")
