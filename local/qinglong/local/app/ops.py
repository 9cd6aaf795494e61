"""The operation table: one name per ``ql3 local`` operation, shared by the socket server
and direct commands so both behave the same."""

from __future__ import annotations

from typing import Any

from qinglong.local.app import pins
from qinglong.local.app.occurrences import task_occurrences
from qinglong.local.app.service import LocalService
from qinglong.shared.errors import ValidationError


def call(service: LocalService, op: str, args: dict[str, Any]) -> Any:
    """Run operation ``op`` with keyword ``args``. Raises ValidationError for an unknown op
    or bad arguments; service errors propagate (all QinglongError subclasses)."""
    try:
        if op == "ping":
            return {"pong": True}
        if op == "task_add":
            return service.task_add(args["spec"])
        if op == "task_edit":
            return service.task_edit(str(args["name"]), dict(args["changes"]))
        if op == "task_next":
            return service.task_next(str(args["name"]), int(args.get("count", 5)))
        if op == "status":
            return service.status()
        if op == "task_list":
            return service.task_list()
        if op == "task_page":
            return service.task_page(int(args.get("offset", 0)), int(args.get("limit", 50)),
                                     str(args.get("query") or ""),
                                     str(args.get("sort") or "name"))
        if op == "logs_wait":
            attempt = args.get("attempt")
            return service.logs_wait(str(args["run_id"]), int(args.get("offset", 0)),
                                     float(args.get("timeout_s", 20.0)),
                                     None if attempt is None else int(attempt))
        if op == "task_show":
            return service.task_show(str(args["name"]))
        if op == "task_enable":
            return service.task_enable(str(args["name"]), bool(args["enabled"]))
        if op == "task_rm":
            return service.task_rm(str(args["name"]))
        if op == "run_now":
            return service.run_now(str(args["name"]))
        if op == "run_get":
            return service.run_get(str(args["run_id"]))
        if op == "runs":
            task = args.get("task")
            status = args.get("status")
            return service.runs(None if task is None else str(task), int(args.get("limit", 20)),
                                None if status is None else str(status))
        if op == "runs_page":
            return service.runs_page(_opt_str(args.get("task")), _opt_str(args.get("status")),
                                     _opt_str(args.get("before")), int(args.get("limit", 50)))
        if op == "task_occurrences":
            return task_occurrences(service.repo, str(args["name"]),
                                    _opt_str(args.get("before")), int(args.get("limit", 50)))
        if op == "schedule_preview":
            return service.schedule_preview(str(args["schedule"]), str(args["timezone"]),
                                            int(args.get("count", 5)))
        if op == "cancel":
            return service.cancel(str(args["run_id"]))
        if op == "logs_read":
            attempt = args.get("attempt")
            return service.logs_read(
                str(args["run_id"]),
                None if attempt is None else int(attempt),
                int(args.get("offset", 0)),
            )
        if op == "logs_tail":
            return service.logs_tail(str(args["run_id"]), int(args["lines"]))
        if op == "recovery_status":
            return service.recovery_status(bool(args.get("verbose", False)))
        if op == "recovery_resolve":
            return service.recovery_resolve([str(r) for r in args["run_ids"]], str(args["as"]))
        if op == "legacy_import":
            return service.legacy_import(dict(args["source"]), dict(args.get("options") or {}))
        if op == "vars_list":
            return service.vars_list()
        if op == "vars_set":
            return service.vars_set(
                str(args["name"]), str(args["value"]), remark=_opt_str(args.get("remark")),
                index=_opt_int(args.get("index")), add=bool(args.get("add", False)),
                secret=None if args.get("secret") is None else bool(args["secret"]))
        if op == "vars_enable":
            return service.vars_enable(str(args["name"]), _opt_int(args.get("index")),
                                       bool(args["enabled"]))
        if op == "vars_show":
            return service.vars_show(str(args["name"]), bool(args.get("reveal", False)))
        if op == "vars_rm":
            return service.vars_rm(str(args["name"]), _opt_int(args.get("index")))
        if op == "settings_show":
            return service.settings_show()
        if op == "settings_set":
            value = args.get("value")
            return service.settings_set(str(args["key"]), None if value is None else str(value))
        if op == "notify_test":
            return service.notify_test()
        if op in pins.OPS:  # pinned tasks and saved views
            return pins.call(service.repo, op, args)
        if op in ("scripts_list", "scripts_read", "scripts_write"):
            return _scripts(service, op, args)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError("request", f"bad arguments for {op}") from None
    raise ValidationError("request", "unknown operation")


def _scripts(service: LocalService, op: str, args: dict[str, Any]) -> Any:
    """The scripts folder's ops (docs/protocols.md §3.8, docs/panel.md "Scripts"):
    ``scripts_list``; ``scripts_read`` {path}; ``scripts_write`` {path, content, version}
    (version: the SHA-256 read, ``""`` for a new file; ``script_changed`` when stale)."""
    folder = service.scripts
    if folder is None:
        raise ValidationError("request", "the scripts folder is served by ql3 local serve only")
    if op == "scripts_list":
        return folder.list()
    if op == "scripts_read":
        return folder.read(_str(args["path"]))
    return folder.write(_str(args["path"]), _str(args["content"]), _str(args["version"]))


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError("a string")
    return value


def _opt_int(value: object) -> int | None:
    return None if value is None else int(str(value))


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)
