"""``ql3 local status`` (issue 12 item 10): the data directory, its profile, its owner and
counts of tasks and runs, whichever process owns the directory."""

from __future__ import annotations

import os
from typing import Any

from qinglong.local.app.client import DirectBackend, SocketBackend
from qinglong.local.app.datadir import DataDir, OwnerLock
from qinglong.local.app.service import LocalService
from qinglong.local.app.store import LocalStore
from qinglong.shared.display import field_lines
from qinglong.shared.errors import DataDirectoryBusyError

_ROLES = {"serve": "serve", "run": "a foreground run"}


def _owner(datadir: DataDir) -> dict[str, Any]:
    """What the owner lock file says: ``{"role", "pid", "what"}`` (``what`` for people)."""
    holder = OwnerLock(datadir).holder().split(maxsplit=1)
    pid = int(holder[0]) if holder and holder[0].isdigit() else None
    role = holder[1] if len(holder) == 2 else "unknown"
    what = _ROLES.get(role, f"ql3 local {role}")
    return {"role": role, "pid": pid, "what": what}


def read_status(datadir: DataDir) -> dict[str, Any]:
    """``{"data_dir", "owner": {"role", "pid", "what"} | None, "counts"}``, where ``counts``
    is :meth:`LocalService.status` (through the owner's socket when it serves one), or None
    when an owner without a socket holds the directory. Raises NotInitialisedError."""
    datadir.require_initialised()
    view: dict[str, Any] = {"data_dir": datadir.root, "owner": None, "counts": None}
    if os.path.exists(datadir.socket_path) and SocketBackend.probe(datadir.socket_path):
        view["owner"] = _owner(datadir)
        view["counts"] = SocketBackend(datadir.socket_path).call("status")
        return view
    try:
        store = LocalStore(datadir, "status")
    except DataDirectoryBusyError:
        view["owner"] = _owner(datadir)
        return view
    try:
        view["counts"] = DirectBackend(LocalService(store.repo, supervised=False)).call("status")
    finally:
        store.close()
    return view


def describe_status(view: dict[str, Any]) -> list[str]:
    """Lines for people."""
    owner = view["owner"]
    counts = view["counts"]
    who = "none (no serve is running: nothing fires on schedule)" if owner is None else (
        f"{owner['what']}" + (f" (pid {owner['pid']})" if owner["pid"] is not None else ""))
    # a long path goes whole on its own line under its label (copyable; --wide: one line)
    lines = field_lines(f"{'data dir':>12}: ", view["data_dir"])
    if counts is None:
        lines += [f"{'owner':>12}: {who}",
                  f"{'counts':>12}: unavailable while {owner['what'] if owner else 'it'} "
                  "holds the directory without a socket"]
        return lines
    lines += [
        f"{'profile':>12}: {counts['profile']}",
        f"{'owner':>12}: {who}",
        f"{'tasks':>12}: {counts['tasks']} ({counts['enabled_tasks']} enabled)",
        f"{'active runs':>12}: {counts['active_runs']} ({counts['queued_runs']} queued)",
    ]
    return lines
