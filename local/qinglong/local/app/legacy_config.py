"""The push variables a Qinglong 2.x ``config/config.sh`` sets (docs/protocols.md §3.8).

Scripts push through their own ``sendNotify`` helpers, configured by variables users keep as
Envs rows or as ``export NAME="value"`` lines in ``config.sh``. Only ``[export ]NAME=WORD``
lines of known push variables with a non-empty value and no ``$`` or backquote are taken;
the file is read, never run.
"""

from __future__ import annotations

import os
import re
import shlex

CONFIG_MAX_BYTES = 1024 * 1024
# sendNotify's variables (Qinglong 2.x sample/notify.js and notify.py), by prefix
PUSH_PREFIXES = (
    "PUSH_KEY", "BARK_", "TG_", "DD_BOT_", "QYWX_", "IGOT_PUSH_KEY", "PUSH_PLUS_", "WE_PLUS_",
    "GOBOT_", "GOTIFY_", "FSKEY", "FSSECRET", "SMTP_", "NTFY_", "DEER_KEY", "CHAT_URL",
    "CHAT_TOKEN", "WEBHOOK_", "PUSHME_", "AIBOTK_", "CHRONOCAT_", "WXPUSHER_", "QMSG_",
    "DODO_", "SYNOLOGY_CHAT_", "PUSH_ME_", "HITOKOTO",
)
_LINE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)")


def config_path(db_path: str) -> str:
    """``config/config.sh`` beside the database's ``db/`` directory (the 2.x layout)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(db_path))), "config",
                        "config.sh")


def is_push_variable(name: str) -> bool:
    """True for a variable Qinglong's ``sendNotify`` reads."""
    return name.startswith(PUSH_PREFIXES)


def read_push_variables(path: str) -> list[tuple[str, str]]:
    """``[(NAME, value)]`` of the push variables ``path`` sets, in file order (a later line
    for the same name wins, as in the shell); ``[]`` when the file is missing or unreadable.
    """
    try:
        with open(path, "rb") as fh:
            text = fh.read(CONFIG_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    found: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.fullmatch(line)
        if match is None or not is_push_variable(match.group(1)):
            continue
        try:
            words = shlex.split(match.group(2), comments=True)
        except ValueError:
            continue
        if words == [""]:  # NAME="" clears it, as the shell would
            found.pop(match.group(1), None)
        elif len(words) == 1 and "$" not in words[0] and "`" not in words[0]:
            found[match.group(1)] = words[0]
    return list(found.items())
