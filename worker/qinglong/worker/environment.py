"""The clean environment of a remote attempt (docs/protocols.md §3.3, reused by the worker §4.2).

Nothing of the worker's own environment leaks in (its token least of all): ``PATH`` is
systemd's default list unless the task's env sets one, ``HOME`` and ``LANG`` come from the
worker, then the task's variables override.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SYSTEMD_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_LANG = "C.UTF-8"


def attempt_environment(task_env: Mapping[str, str],
                        worker_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Build the attempt's environment: ``{PATH, HOME, LANG}`` then ``task_env`` on top.

    ``worker_env`` defaults to ``os.environ`` and is read only for HOME and LANG (HOME falls
    back to ``/``, LANG to ``C.UTF-8``). Names or values holding NUL are dropped by the wire's
    producer, not here: ``subprocess`` refuses them with ValueError, which fails the attempt.
    """
    source = os.environ if worker_env is None else worker_env
    env = {
        "PATH": SYSTEMD_DEFAULT_PATH,
        "HOME": source.get("HOME") or "/",
        "LANG": source.get("LANG") or DEFAULT_LANG,
    }
    env.update(task_env)
    return env


def default_cwd(worker_env: Mapping[str, str] | None = None) -> str:
    """Where an attempt whose task has no cwd runs: the worker user's ``HOME`` when it is an
    absolute path to an existing directory (as the local profile and cron do), else ``/``.
    Never the worker's own working directory. ``worker_env`` defaults to ``os.environ``."""
    home = (os.environ if worker_env is None else worker_env).get("HOME") or ""
    return home if os.path.isabs(home) and os.path.isdir(home) else "/"
