"""The local profile's :class:`~qinglong.panel.backend.PanelBackend`: a client of the owner
(``ql3 local serve``) over the data directory's Unix socket (docs/protocols.md §3.8).

It never opens ``ql3.db`` and never takes ``ql3.lock``: every answer comes from the owner.
"""

from __future__ import annotations

import os
import shlex
import socket
import struct
from datetime import UTC, datetime
from typing import Any

from qinglong.local.app.client import (
    RemoteError,
    RemoteNotFoundError,
    RemoteValidationError,
    ServerUnavailableError,
    SocketBackend,
)
from qinglong.panel.backend import (
    FEATURES,
    VIEWS,
    BackendRefusedError,
    BackendUnavailableError,
    NotInProfileError,
)
from qinglong.shared.zones import machine_zone

#: the notification settings the Settings page lists (``settings_show`` keys), in order
NOTIFY_KEYS = ("notify_command", "notify_webhook", "notify_urls")


class LocalPanelBackend:
    """Implements PanelBackend over ``socket_path`` (a path; the socket is 0600 and checked
    with SO_PEERCRED, so the panel runs as the owner's user)."""

    profile = "local"
    # every page but the cluster's two, with pinned tasks and saved views
    features = FEATURES - {"workers", "bundles"} | {VIEWS}

    def __init__(self, socket_path: str) -> None:
        #: a new task's zone in the form: this machine's, as ``ql3 local task add`` without
        #: --timezone takes it (the web runs beside its owner, with serve's environment)
        self.default_timezone = machine_zone()[0]
        self._socket = SocketBackend(socket_path)
        self._path = socket_path

    def _call(self, op: str, **args: Any) -> Any:
        try:
            return self._socket.call(op, **args)
        except ServerUnavailableError as exc:
            raise BackendUnavailableError(str(exc)) from None
        except RemoteNotFoundError as exc:
            raise BackendRefusedError("not_found", str(exc), usage=True) from None
        except RemoteValidationError as exc:  # ``too_large``: over the socket's request
            code = "too_large" if str(exc).startswith("request: larger") else "validation"
            raise BackendRefusedError(code, str(exc), usage=True) from None
        except RemoteError as exc:
            raise BackendRefusedError(exc.code, str(exc)) from None
        except OSError as exc:  # a reply cut off mid-way, a timeout
            raise BackendUnavailableError(type(exc).__name__) from None

    def _list(self, op: str, **args: Any) -> list[dict[str, Any]]:
        return [dict(item) for item in self._call(op, **args)]

    def available(self) -> bool:
        """True when ``serve`` answers ``ping``."""
        try:
            self._call("ping")
        except (BackendUnavailableError, BackendRefusedError):
            return False
        return True

    def task_page(self, offset: int, limit: int, query: str,
                  sort: str = "name") -> dict[str, Any]:
        """The ``task_page`` socket op."""
        return dict(self._call("task_page", offset=offset, limit=limit, query=query,
                               sort=sort))

    # -- pinned tasks and saved views (docs/panel.md "Pinned tasks and saved views") ------

    def task_pin(self, name: str, pinned: bool) -> dict[str, Any]:
        """The ``task_pin`` socket op."""
        return dict(self._call("task_pin", name=name, pinned=pinned))

    def views_list(self) -> list[dict[str, Any]]:
        """The ``views_list`` socket op's views."""
        return [dict(v) for v in self._call("views_list")["views"]]

    def views_save(self, name: str, query: str, sort: str) -> dict[str, Any]:
        """The ``views_save`` socket op."""
        return dict(self._call("views_save", name=name, query=query, sort=sort))

    def views_remove(self, name: str) -> dict[str, Any]:
        """The ``views_rm`` socket op."""
        return dict(self._call("views_rm", name=name))

    def run_now(self, task: str) -> dict[str, Any]:
        """The ``run_now`` socket op."""
        return dict(self._call("run_now", name=task))

    def set_enabled(self, task: str, enabled: bool) -> dict[str, Any]:
        """The ``task_enable`` socket op."""
        return dict(self._call("task_enable", name=task, enabled=enabled))

    def cancel_run(self, run: str) -> dict[str, Any]:
        """The ``cancel`` socket op."""
        return dict(self._call("cancel", run_id=run))

    def run_get(self, run: str) -> dict[str, Any]:
        """The ``run_get`` socket op."""
        return dict(self._call("run_get", run_id=run))

    def log_wait(self, run: str, offset: int, timeout_s: float,
                 attempt: int | None = None) -> dict[str, Any]:
        """The ``logs_wait`` socket op (a long poll on the owner's connection thread)."""
        return dict(self._call("logs_wait", run_id=run, offset=offset, timeout_s=timeout_s,
                               attempt=attempt))

    def log_read(self, run: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
        """The ``logs_read`` socket op (``attempt`` None: the newest)."""
        return dict(self._call("logs_read", run_id=run, offset=offset, attempt=attempt))

    def task_get(self, name: str) -> dict[str, Any]:
        """The ``task_show`` socket op."""
        return dict(self._call("task_show", name=name))

    def task_add(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The ``task_add`` socket op."""
        return dict(self._call("task_add", spec=spec))

    def task_edit(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """The ``task_edit`` socket op."""
        return dict(self._call("task_edit", name=name, changes=changes))

    def task_remove(self, name: str) -> dict[str, Any]:
        """The ``task_rm`` socket op."""
        return dict(self._call("task_rm", name=name))

    def schedule_preview(self, schedule: str, timezone: str, count: int) -> dict[str, Any]:
        """The ``schedule_preview`` socket op."""
        return dict(self._call("schedule_preview", schedule=schedule, timezone=timezone,
                               count=count))

    def runs_page(self, task: str | None, status: str | None, before: str | None,
                  limit: int) -> dict[str, Any]:
        """The ``runs_page`` socket op."""
        return dict(self._call("runs_page", task=task, status=status, before=before,
                               limit=limit))

    def vars_list(self) -> list[dict[str, Any]]:
        """The ``vars_list`` socket op."""
        return self._list("vars_list")

    def vars_reveal(self, name: str) -> dict[str, Any]:
        """The ``vars_show`` socket op with ``reveal``."""
        return dict(self._call("vars_show", name=name, reveal=True))

    def vars_set(self, name: str, value: str, *, remark: str | None, add: bool,
                 secret: bool | None) -> dict[str, Any]:
        """The ``vars_set`` socket op."""
        return dict(self._call("vars_set", name=name, value=value, remark=remark, add=add,
                               secret=secret))

    def vars_enable(self, name: str, index: int | None, enabled: bool) -> dict[str, Any]:
        """The ``vars_enable`` socket op."""
        return dict(self._call("vars_enable", name=name, index=index, enabled=enabled))

    def vars_remove(self, name: str, index: int | None) -> dict[str, Any]:
        """The ``vars_rm`` socket op."""
        return dict(self._call("vars_rm", name=name, index=index))

    def occurrences_page(self, task: str, before: str | None, limit: int) -> dict[str, Any]:
        """The ``task_occurrences`` socket op."""
        return dict(self._call("task_occurrences", name=task, before=before, limit=limit))

    def workers_page(self, before: str | None, limit: int) -> dict[str, Any]:
        """No workers in the local profile: raises NotInProfileError ``workers``."""
        raise NotInProfileError("workers")
    def scripts_list(self) -> dict[str, Any]:
        """The ``scripts_list`` socket op."""
        return dict(self._call("scripts_list"))

    def script_read(self, path: str) -> dict[str, Any]:
        """The ``scripts_read`` socket op."""
        return dict(self._call("scripts_read", path=path))

    def script_write(self, path: str, content: str, version: str) -> dict[str, Any]:
        """The ``scripts_write`` socket op."""
        return dict(self._call("scripts_write", path=path, content=content, version=version))

    def bundles_list(self, after: str | None = None) -> dict[str, Any]:
        """Not in this profile (bundles are the cluster's)."""
        raise NotInProfileError("bundles")

    def bundle_file(self, digest: str, path: str) -> dict[str, Any]:
        """Not in this profile."""
        raise NotInProfileError("bundles")

    def bundle_show(self, digest: str) -> dict[str, Any]:
        """Not in this profile."""
        raise NotInProfileError("bundles")

    def bundle_push(self, data: bytes) -> dict[str, Any]:
        """Not in this profile."""
        raise NotInProfileError("bundles")

    def bundle_remove(self, digest: str) -> dict[str, Any]:
        """Not in this profile."""
        raise NotInProfileError("bundles")
    def settings(self) -> dict[str, Any]:
        """The Settings page's facts (``PanelBackend.settings``): the ``status``,
        ``recovery_status`` and ``settings_show`` ops, the data directory (the socket's),
        and the owner's pid (the socket peer's, ``SO_PEERCRED``) with its start time
        (``/proc``; None where there is none). Notification channels show as
        ``settings_show`` shows them (a webhook by host, URLs by target), a command by
        its program only."""
        status = dict(self._call("status"))
        recovery = dict(self._call("recovery_status"))
        shown = {row["key"]: row for row in self._list("settings_show")}
        channels = []
        for key in NOTIFY_KEYS:
            value = shown.get(key, {}).get("value")
            if value and key == "notify_command":
                value = _program(value)
            if value:
                channels.append({"channel": key.removeprefix("notify_"), "target": value})
        notify_on = shown.get("notify_on", {})
        return {"profile": status.get("profile", "local"),
                "data_dir": os.path.dirname(os.path.abspath(self._path)),
                "owner": _owner(self._path),
                "recovery": {"candidates": int(recovery.get("candidates", 0)),
                             "active_attempts": int(recovery.get("active_attempts", 0)),
                             "leftovers": len(recovery.get("leftovers_unresolved") or [])},
                "channels": channels,
                "notify_on": notify_on.get("value") or notify_on.get("default") or "",
                "notify_timeout_s": (shown.get("notify_timeout_s", {}).get("value")
                                     or shown.get("notify_timeout_s", {}).get("default"))}

    def settings_set(self, key: str, value: str | None) -> dict[str, Any]:
        """The ``settings_set`` socket op (None: back to the default); the Settings page's
        notification form."""
        return dict(self._call("settings_set", key=key, value=value))

    def notify_test(self) -> dict[str, Any]:
        """The ``notify_test`` socket op: ``{"configured", "deliveries": [{"channel",
        "ok"}]}`` (its other facts and error texts stay in the CLI's view)."""
        answer = dict(self._call("notify_test"))
        return {"configured": bool(answer.get("configured")),
                "deliveries": [{"channel": str(d.get("channel", "")), "ok": bool(d.get("ok"))}
                               for d in answer.get("deliveries") or []]}

    def token_create(self, name: str, scope: str) -> dict[str, Any]:
        """Not in the local profile (it has no API tokens)."""
        raise NotInProfileError("tokens")

    def token_get(self, token_id: str) -> dict[str, Any]:
        """Not in the local profile."""
        raise NotInProfileError("tokens")

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        """Not in the local profile."""
        raise NotInProfileError("tokens")


_UCRED = struct.Struct("3i")


def _program(command: str) -> str:
    """The program of a shell-quoted command line (its arguments may hold a secret)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return "…"
    return f"{os.path.basename(words[0])} …" if words else "…"


def _owner(socket_path: str) -> dict[str, Any] | None:
    """``{"pid", "since"}`` of the process serving ``socket_path`` (its ``SO_PEERCRED``
    pid; ``since``: its start, ISO UTC, from ``/proc``, or None), or None when nothing
    answers. Linux only (None elsewhere)."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2.0)
            sock.connect(socket_path)
            pid, _uid, _gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, peercred,
                                                            _UCRED.size))
    except OSError:
        return None
    return {"pid": pid, "since": _started(pid)}


def _started(pid: int) -> str | None:
    """When process ``pid`` started (ISO UTC, whole seconds), from ``/proc``; None when it
    cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rpartition(")")[2].split()
        with open("/proc/stat", encoding="ascii") as machine:
            boot = next(int(line.split()[1]) for line in machine if line.startswith("btime"))
        ticks = int(fields[19])  # field 22, starttime, counted after "pid (comm)"
        start = boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return datetime.fromtimestamp(int(start), UTC).isoformat().replace("+00:00", "Z")
