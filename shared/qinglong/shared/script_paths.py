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
import shutil
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
        FileNotFoundError: an absolute script path that does not exist, or a command given
            as one word holding spaces that names no program (``'echo hi'`` quoted whole:
            it is never split, so it could only fail at run time with 127); the message
            names it; callers offer ``--no-check``. Also a word that is a shell operator
            (:func:`shell_operator`: ``&&`` would be echoed, not obeyed).
    """
    _check_one_word(argv, cwd)
    operator = shell_operator(argv)
    if operator is not None:
        raise FileNotFoundError(
            f"'{operator}' is a shell operator, but the command runs without a shell (it "
            "would be passed on as an argument); run it through sh -c '…'")
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


#: words a shell would read as operators (the command runs without one)
SHELL_OPERATORS = frozenset({"&&", "||", "|", "|&", ";", ";;", "&", ">", ">>", "<", "<<",
                             "<<<", "2>", "2>>", "&>", "&>>", "2>&1", "1>&2", ">&2"})


def shell_operator(argv: Sequence[str]) -> str | None:
    """The first word of ``argv`` that is a shell operator (:data:`SHELL_OPERATORS`, or a
    word ending in ``;`` such as ``成功;``), or None. Inside ``sh -c '…'`` they are one
    word's text, never words of their own; find's ``-exec … ;`` is no operator."""
    finds = {"-exec", "-execdir", "-ok", "-okdir"} & set(argv)  # find's own `;` word
    for word in argv[1:]:
        if word == ";" and finds:
            continue
        if word in SHELL_OPERATORS or (len(word) > 1 and word.endswith(";")):
            return word
    return None


def _check_one_word(argv: Sequence[str], cwd: str | None) -> None:
    """Raise FileNotFoundError when ``argv`` is a single word with spaces inside that is no
    program on PATH and no file (relative to ``cwd``, else the home directory)."""
    if len(argv) != 1 or not any(c.isspace() for c in argv[0].strip()):
        return
    word = argv[0]
    base = cwd or os.path.expanduser("~")
    if shutil.which(word) is not None or os.path.exists(os.path.join(base, word)):
        return
    shown = word if len(word) <= 40 else word[:39] + "…"
    raise FileNotFoundError(
        f"no program is named '{shown}': a command quoted as one word is not split; give "
        "its words separately (-- echo hi) or run it through sh -c")
