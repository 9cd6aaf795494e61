"""The script a task's command runs, checked when the task is added or edited
(docs/operations.md "First hour"): a relative path is looked up in the task's working
directory at run time, not where ``task add`` was typed, and a missing absolute path can only
fail later. Stdlib only.

:func:`script_path` finds the path: the command itself when it names a path
(``examples/fail.sh``, ``/opt/x.sh``), or the first operand of a known interpreter
(``python3 jobs/sync.py``, ``node /ql/scripts/jd_sign.js``) — never an inline script
(``sh -c '…'``) or a bare name looked up in PATH (``backup``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

INTERPRETERS = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "python", "python3", "node", "ts-node", "deno", "bun",
    "perl", "ruby", "php", "lua"})


def script_path(argv: Sequence[str]) -> str | None:
    """The file path ``argv`` runs (module docstring), or None."""
    if not argv:
        return None
    first = argv[0]
    if "/" in first and os.path.basename(first) not in INTERPRETERS:
        return first
    if os.path.basename(first) not in INTERPRETERS:
        return None
    for arg in argv[1:]:
        if arg in ("-c", "-e", "--eval", "-m", "-"):  # inline code, a module, stdin
            return None
        if arg.startswith("-"):
            continue
        return arg if ("/" in arg or "." in os.path.basename(arg)) else None
    return None


def check_script(argv: Sequence[str], cwd: str | None) -> str | None:
    """A warning for a relative script path (one sentence naming where it will be looked
    up: ``cwd``, or the home directory when None), or None.

    Raises:
        FileNotFoundError: an absolute script path that does not exist (the message names
            the path; callers offer ``--no-check``).
    """
    path = script_path(argv)
    if path is None:
        return None
    if os.path.isabs(path):
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} does not exist")
        return None
    where = cwd or "the home directory of the user running it"
    return (f"{path} is a relative path: at run time it is looked up in the task's working "
            f"directory ({where}), not here; give an absolute path or --cwd")
