"""The size limits of environment variables a task is started with, shared by ``ql3 local``'s
global variables (``local/app/service.py``) and the cluster's (``control/db/variables.py``;
docs/protocols.md §4.5 "Global variables"). Stdlib only.

One ``NAME=value`` entry, NUL included, is at most :data:`VARIABLE_MAX_BYTES` (Linux
``MAX_ARG_STRLEN``, 128 KiB); all of them together at most a budget the caller gives (the
cluster: 1 MiB a pool; locally: the launcher's share for global variables).

Some names are not a global variable's to set (:func:`check_settable_name`): ``PATH`` (the
runtime gives every task its own), any ``LD_*`` (they change how every process is loaded:
``LD_PRELOAD``, ``LD_LIBRARY_PATH``) and ``QL3_*`` (the runtime's own). Names Qinglong users
set themselves (``NODE_OPTIONS``, ``HOME``, ``LANG``, ...) stay settable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from qinglong.shared.errors import ValidationError

VARIABLE_MAX_BYTES = 32 * 4096  # Linux MAX_ARG_STRLEN: one NAME=value entry, NUL included
NAME_MAX_CHARS = 128
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
NAME_RULE = "a variable name is 1-128 of A-Z, a-z, 0-9 and _, not starting with a digit"


def check_variable_name(name: object, field: str = "variable") -> str:
    """``name`` when it is a global variable's name in both profiles: ``[A-Za-z_]
    [A-Za-z0-9_]*``, 1-:data:`NAME_MAX_CHARS` characters. Raises ValidationError(``field``,
    :data:`NAME_RULE`), never echoing the name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationError(field, NAME_RULE)
    return name


PATH_ADVICE = ("give a task its own PATH with --env PATH=... (locally, every task's with "
               "`ql3 local settings set task_path`)")


def reserved_name_problem(name: str) -> str | None:
    """Why a global variable may not be called ``name`` (one sentence), or None when it may
    (module docstring: ``PATH``, ``LD_*``, ``QL3_*``)."""
    if name == "PATH":
        return ("PATH cannot be a global variable: the runtime sets it for every task, and "
                "a global PATH would replace it so that tasks stop finding their programs; "
                + PATH_ADVICE)
    if name.startswith("LD_"):
        return (f"{name} cannot be a global variable: LD_* names are the dynamic linker's "
                "and change how every task's processes are loaded")
    if name.startswith("QL3_"):
        return f"{name} cannot be a global variable: QL3_* names are the runtime's own"
    return None


def check_settable_name(name: str, field: str = "variable") -> str:
    """``name`` when a global variable may be set under it; the same rule in both profiles'
    setters (``ql3 local vars set``, ``POST /v1/vars/{name}``). Removing one stays allowed,
    so a variable stored before the rule can be cleaned up.

    Raises:
        ValidationError: ``field`` named, the message :func:`reserved_name_problem`'s.
    """
    problem = reserved_name_problem(name)
    if problem is not None:
        raise ValidationError(field, problem)
    return name


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
