"""Data-directory settings a user changes with ``ql3 local settings`` (issue 12 items 8–9).

Stored as text in the ``settings`` table (migration 0001), read at each use, so a change
applies to the next attempt or notification without restarting ``serve``:

========================  ====================================================================
``task_path``             ``PATH`` of every task (default: systemd's list,
                          :data:`DEFAULT_TASK_PATH`); absolute directories joined by ``:``.
                          A task's own ``--env PATH`` wins.
``notify_command``        argv of a command run when a run ends in a ``notify_on`` status,
                          stored as a JSON list (written as one shell-quoted string).
``notify_webhook``        an ``http(s)://`` URL that gets a JSON POST then. Treated as a
                          secret (it often carries a token): shown as scheme and host only.
``notify_urls``           one or more Apprise URLs (``bark://``, ``tgram://``, ``wecombot://``,
                          ``dingtalk://``, ``feishu://``, ``pushplus://``, ``schan://``,
                          ``gotify://``, ``ntfy://``, ``mailto://``, ``json://``...), separated
                          by spaces or lines, sent by the optional ``qinglong[notify]``. Each
                          URL is a secret as a whole: shown as scheme (and host) only.
``notify_on``             comma-separated statuses (default ``failed,timed_out,lost``; may add
                          ``succeeded`` and ``cancelled``).
``notify_timeout_s``      seconds each channel may take, 1–25 (default 10).
========================  ====================================================================
"""

from __future__ import annotations

import json
import os
import re
import shlex
import urllib.parse
from collections.abc import Callable
from typing import Any

from qinglong.shared.errors import ValidationError

TASK_PATH = "task_path"
NOTIFY_COMMAND = "notify_command"
NOTIFY_WEBHOOK = "notify_webhook"
NOTIFY_URLS = "notify_urls"
NOTIFY_ON = "notify_on"
NOTIFY_TIMEOUT = "notify_timeout_s"
KEYS = (TASK_PATH, NOTIFY_COMMAND, NOTIFY_WEBHOOK, NOTIFY_URLS, NOTIFY_ON, NOTIFY_TIMEOUT)
NOTIFY_URLS_MAX = 16
_APPRISE_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,31}://\S+")
NOTIFY_ON_DEFAULT = ("failed", "timed_out", "lost")
NOTIFY_ON_ALLOWED = ("failed", "timed_out", "lost", "succeeded", "cancelled")
NOTIFY_TIMEOUT_DEFAULT_S = 10.0
NOTIFY_TIMEOUT_MAX_S = 25  # two channels in turn stay within the client's 60 s reply wait

# systemd's default PATH for services (``DefaultEnvironment``; issue 12 item 8): a task never
# inherits the runtime's own PATH, where ``python3`` may be ql3's virtualenv interpreter.
DEFAULT_TASK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def runtime_base_env(path: str | None = None) -> dict[str, str]:
    """``PATH`` (``path``, else :data:`DEFAULT_TASK_PATH`; never the runtime's own), and
    ``HOME`` and ``LANG`` from the runtime's environment; nothing else (docs/protocols.md §3.3)."""
    env = {"PATH": path or DEFAULT_TASK_PATH}
    for name in ("HOME", "LANG"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


DEFAULTS = {TASK_PATH: DEFAULT_TASK_PATH, NOTIFY_ON: ",".join(NOTIFY_ON_DEFAULT),
            NOTIFY_TIMEOUT: "10"}


def normalise(key: str, value: str) -> str:
    """The stored text for ``key`` set to ``value`` (as typed). Raises ValidationError
    naming the key; the message never repeats a webhook URL."""
    if key not in KEYS:
        raise ValidationError("setting", f"unknown setting {key!r}; known: {', '.join(KEYS)}")
    if "\x00" in value:
        raise ValidationError(key, "must not contain a NUL byte")
    if key == TASK_PATH:
        parts = value.split(":")
        if not value or not all(p.startswith("/") for p in parts):
            raise ValidationError(key, "use absolute directories joined by ':'")
        return value
    if key == NOTIFY_COMMAND:
        try:
            argv = shlex.split(value)
        except ValueError as exc:
            raise ValidationError(key, f"cannot split it as a shell would: {exc}") from None
        if not argv or not argv[0].strip():
            raise ValidationError(key, "the command must not be empty")
        return json.dumps(argv)
    if key == NOTIFY_WEBHOOK:
        parsed = urllib.parse.urlsplit(value.strip())
        try:
            parsed.port  # noqa: B018 (raises ValueError for a bad port)
        except ValueError:
            raise ValidationError(key, "the URL's port is not a number") from None
        if parsed.scheme not in ("http", "https") or not parsed.hostname or any(
                c.isspace() for c in value.strip()):
            raise ValidationError(key, "use an http:// or https:// URL")
        return value.strip()
    if key == NOTIFY_URLS:
        urls = list(dict.fromkeys(value.split()))
        if not urls or len(urls) > NOTIFY_URLS_MAX or not all(
                _APPRISE_URL.fullmatch(u) for u in urls):
            raise ValidationError(key, f"give 1-{NOTIFY_URLS_MAX} channel URLs such as "
                                       "bark://HOST/KEY or tgram://TOKEN/CHAT, separated by "
                                       "spaces or lines")
        return json.dumps(urls)
    if key == NOTIFY_ON:
        names = [n.strip() for n in value.split(",") if n.strip()]
        bad = [n for n in names if n not in NOTIFY_ON_ALLOWED]
        if not names or bad:
            raise ValidationError(key, f"use a comma-separated subset of "
                                       f"{','.join(NOTIFY_ON_ALLOWED)}")
        return ",".join(dict.fromkeys(names))
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 1 <= seconds <= NOTIFY_TIMEOUT_MAX_S:
        raise ValidationError(key, f"use a number of seconds from 1 to {NOTIFY_TIMEOUT_MAX_S}")
    return f"{seconds:g}"


def shown(key: str, stored: str | None) -> dict[str, Any]:
    """One setting as a view: ``{"key", "value", "default"}``; ``value`` is None when unset,
    a webhook shows ``scheme://host/…`` only, channel URLs :func:`channel_target` each, a
    command its shell-quoted argv."""
    value: str | None = stored
    if stored is not None and key == NOTIFY_WEBHOOK:
        value = mask_url(stored)
    elif stored is not None and key == NOTIFY_COMMAND:
        value = shlex.join(json.loads(stored))
    elif stored is not None and key == NOTIFY_URLS:
        value = ", ".join(channel_target(u) for u in json.loads(stored))
    return {"key": key, "value": value, "default": DEFAULTS.get(key)}


def task_path_env(get_setting: Callable[[str], str | None]) -> dict[str, str]:
    """The base environment of a task or a notify command now: ``PATH`` from the
    ``task_path`` setting (else systemd's list), ``HOME`` and ``LANG`` of the runtime."""
    return runtime_base_env(get_setting(TASK_PATH))


def notify_cwd() -> str:
    """Where the notify command runs: ``$HOME`` if it is a directory, else ``/``."""
    home = os.environ.get("HOME", "")
    return home if os.path.isabs(home) and os.path.isdir(home) else "/"


def mask_url(url: str) -> str:
    """``https://hooks.example.com/…``: scheme and host (and port), never a path, query or
    user info, which often hold a token."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or "?"
    try:
        port = f":{parsed.port}" if parsed.port else ""
    except ValueError:
        port = ""
    return f"{parsed.scheme}://{host}{port}/…"


def channel_target(url: str) -> str:
    """A channel URL as shown, ``bark://push.example.com/…``: the scheme, and the host when
    it looks like one (a dot, ``localhost`` or an IPv6 literal); never a path, query or user
    info, nor a host part that is a token (``tgram://123:ABC/…`` shows as ``tgram://…``)."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].rpartition("@")[2]
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    shown = host if ("." in name or name == "localhost" or name.startswith("[")) else ""
    return f"{scheme.lower()}://{shown}/…" if shown else f"{scheme.lower()}://…"
