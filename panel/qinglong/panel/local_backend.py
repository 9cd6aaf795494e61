"""The local profile's :class:`~qinglong.panel.backend.PanelBackend`: a client of the owner
(``ql3 local serve``) over the data directory's Unix socket (docs/protocols.md §3.8).

It never opens ``ql3.db`` and never takes ``ql3.lock``: every answer comes from the owner.
"""

from __future__ import annotations

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
    BackendRefusedError,
    BackendUnavailableError,
    NotInProfileError,
)


class LocalPanelBackend:
    """Implements PanelBackend over ``socket_path`` (a path; the socket is 0600 and checked
    with SO_PEERCRED, so the panel runs as the owner's user)."""

    profile = "local"
    features = FEATURES - {"workers"}  # every page but the cluster's Workers

    def __init__(self, socket_path: str) -> None:
        self._socket = SocketBackend(socket_path)

    def _call(self, op: str, **args: Any) -> Any:
        try:
            return self._socket.call(op, **args)
        except ServerUnavailableError as exc:
            raise BackendUnavailableError(str(exc)) from None
        except RemoteNotFoundError as exc:
            raise BackendRefusedError("not_found", str(exc), usage=True) from None
        except RemoteValidationError as exc:
            raise BackendRefusedError("validation", str(exc), usage=True) from None
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

    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        """The ``task_page`` socket op."""
        return dict(self._call("task_page", offset=offset, limit=limit, query=query))

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

    def log_wait(self, run: str, offset: int, timeout_s: float) -> dict[str, Any]:
        """The ``logs_wait`` socket op (a long poll on the owner's connection thread)."""
        return dict(self._call("logs_wait", run_id=run, offset=offset, timeout_s=timeout_s))

    def log_read(self, run: str, offset: int) -> dict[str, Any]:
        """The ``logs_read`` socket op (newest attempt)."""
        return dict(self._call("logs_read", run_id=run, offset=offset))

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
