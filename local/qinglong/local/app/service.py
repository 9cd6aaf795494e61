"""The operations behind every ``ql3 local`` command, as JSON-able results.

The same methods serve a direct command (the CLI owns the data directory) and the socket of
a running ``serve`` (docs/protocols.md §3.8), so both print the same JSON.
"""

from __future__ import annotations

import os
import shlex
import stat
import time
from collections.abc import Callable
from typing import Any

from qinglong.local.app import pins
from qinglong.local.app import settings as keys
from qinglong.local.app.log_layout import raw_offset, read_raw
from qinglong.local.app.run_refs import resolve_run_ref
from qinglong.local.app.scripts_folder import ScriptsFolder
from qinglong.local.app.task_input import TaskInput, check_launch_budget
from qinglong.local.app.views import event_view, iso, run_view, task_view
from qinglong.local.process.receipt_store import ReceiptStore
from qinglong.local.recovery.evidence import attempt_evidence
from qinglong.local.recovery.manual import resolve_run
from qinglong.local.scheduling.slot_policy import admit_manual
from qinglong.local.storage import variables
from qinglong.local.storage.repository import LocalRunRepository
from qinglong.local.storage.secrets import SecretEntry, TaskSecretStore, masked
from qinglong.shared.domain import Task
from qinglong.shared.errors import (
    ConcurrentUpdateError,
    NotFoundError,
    QinglongError,
    ValidationError,
)
from qinglong.shared.ids import validate_uuid7
from qinglong.shared.statuses import ATTEMPT_ACTIVE, RUN_TERMINAL, AttemptStatus
from qinglong.shared.variable_limits import check_settable_name

LOG_CHUNK_BYTES = 64 * 1024
TAIL_SCAN_BYTES = 1024 * LOG_CHUNK_BYTES  # `logs --tail` looks back at most 64 MiB


class LogFileMissingError(QinglongError):
    """An attempt's log file is gone without a retention tombstone (deleted by hand, say):
    not a usage error, so the command exits 1 (an unknown run or task exits 2)."""

    code = "log_missing"

VALUE_MASK = "********"


class LocalService:
    """Task, run and log operations over one repository.

    ``supervised``: whether a live owner supervises active runs (True inside ``serve``);
    ``wake``: called after a change the scheduler/dispatcher must notice;
    ``stop_run``: asks the live coordinator to stop a run (None when nothing runs here);
    ``scripts``: the data directory's scripts folder (None: the ``scripts_*`` ops refuse).
    """

    def __init__(
        self,
        repo: LocalRunRepository,
        *,
        supervised: bool,
        wake: Callable[[], None] | None = None,
        stop_run: Callable[[str], bool] | None = None,
        receipts: ReceiptStore | None = None,
        scripts: ScriptsFolder | None = None,
    ) -> None:
        self.repo = repo
        self.scripts = scripts
        self.secrets = TaskSecretStore(repo.db, repo.clock)
        self.receipts = receipts
        self.supervised = supervised
        self._wake = wake or (lambda: None)
        self._stop_run = stop_run

    # -- tasks ----------------------------------------------------------------------------

    def task_add(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Validate and store a task (``spec`` holds TaskInput fields). ValidationError or
        ConflictError leave nothing changed."""
        try:
            data = TaskInput(
                name=spec["name"],
                argv=tuple(spec["argv"]),
                schedule=spec["schedule"],
                timezone=_or(spec.get("timezone"), "UTC"),
                env=dict(spec.get("env") or {}),
                cwd=spec.get("cwd"),
                timeout_s=spec.get("timeout_s"),
                max_attempts=int(_or(spec.get("max_attempts"), 1)),
                concurrency=_or(spec.get("concurrency"), "forbid"),
                labels=tuple(spec.get("labels") or ()),
            )
        except (KeyError, TypeError, ValueError):
            raise ValidationError("task", "name, argv and schedule are required") from None
        secret = secret_entries(spec.get("secret_env"))
        task = data.to_task()
        check_secret_env(task.argv, task.env, secret)
        task = self.repo.create_task(task, secret_env=secret)
        self._wake()
        return self._task_view(task)

    def _task_view(self, task: Any, refs: dict[str, str | None] | None = None) -> dict[str, Any]:
        """:func:`task_view` plus ``secret_env``: ``{name: "********" or "@VAR"}``."""
        view = task_view(task)
        view["secret_env"] = masked(self.secrets.refs(task.id) if refs is None else refs)
        return view

    def task_edit(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change a live task in place (issue 12 item 1; ``changes`` as
        :func:`~qinglong.local.app.task_changes.apply_changes` takes them): same id and
        history, one ``task_edited`` event naming the fields changed (no env values; secret
        variables set or removed by ``secret_env``/``secret_env_unset``, by name). Allowed
        while a run is active: a run already started keeps its definition, the next one gets
        the new. A new schedule or zone makes the next fire time pending from the edit on,
        computed by the running ``serve`` (woken here). Returns the task's view plus
        ``changed`` (field names, empty when nothing differed: no event then) and
        ``active_runs`` (runs dispatching or running now). ``changes["if_version"]``: the
        task's ``version`` as the editor read it; another edit since is refused (docs/panel.md
        "Task form"). Raises ValidationError, NotFoundError, ConcurrentUpdateError."""
        from qinglong.local.app.task_changes import apply_changes

        task = self.repo.get_task(name)
        changes = dict(changes)
        seen = changes.pop("if_version", None)  # the version the editor read (the panel's)
        if seen is not None and seen != task.version:
            raise ConcurrentUpdateError(
                f"task '{task.name}' changed meanwhile; read it again and retry")
        new, detail = apply_changes(task, changes)
        secret = secret_entries(changes.get("secret_env"))
        secret_unset = [str(n) for n in changes.get("secret_env_unset") or ()]
        check_secret_env(new.argv, new.env, secret)
        if detail["changed"] or secret or secret_unset:
            task, detail = self.repo.edit_task_and_secrets(task, new, detail, secret,
                                                           secret_unset)
            if detail["changed"]:
                self._wake()
        view = self._task_view(task)
        view["changed"] = detail["changed"]
        view["active_runs"] = len(self.repo.active_runs(task.id))
        return view

    def task_next(self, name: str, count: int = 5) -> dict[str, Any]:
        """The next ``count`` (1-100) slots of a live task from now (issue 12 item 2):
        ``{"task", "schedule", "timezone", "enabled", "slots": [ISO UTC...]}``; ``slots`` is
        empty for ``@boot``/``@once``. Raises NotFoundError, ValidationError."""
        from qinglong.local.app.task_changes import upcoming_slots

        task = self.repo.get_task(name)
        slots = upcoming_slots(task, self.repo.clock(), count)
        return {"task": task.name, "schedule": task.schedule, "timezone": task.timezone,
                "enabled": task.enabled, "slots": [iso(s) for s in slots]}

    def task_list(self) -> list[dict[str, Any]]:
        """Live tasks by name, each with ``next_fire``/``next_fire_pending`` (as
        :meth:`task_show`) and ``last_run`` (:func:`last_run_view`, None: never ran); secret
        env values masked."""
        return self._task_views(self.repo.list_tasks())

    def _task_views(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """:meth:`task_list`'s views of ``tasks``, in their order (one overview query, one
        run read per task that ran)."""
        refs = self.secrets.refs_by_task()
        overview = self.repo.task_overview([t.id for t in tasks])
        views = []
        for task in tasks:
            next_fire, pending, last_id = overview.get(task.id, (None, None, None))
            view = self._task_view(task, refs.get(task.id, {}))
            view["next_fire"] = iso(next_fire) if task.enabled and pending is None else None
            view["next_fire_pending"] = _awaits_next_fire(task, pending)
            view["last_run"] = last_run_view(self.repo.get_run(last_id)) if last_id else None
            views.append(view)
        return views

    def task_page(self, offset: int = 0, limit: int = 50, query: str = "",
                  sort: str = "name") -> dict[str, Any]:
        """One page (offset >= 0, limit 1-200 rows) of :meth:`task_list`, those whose name,
        label, argv word or command as shown (``sh -c 'echo hello'``) holds ``query`` (any
        case), pinned tasks first, then by ``sort``
        (``app/pins.SORTS``); each task says ``pinned``: ``{"tasks", "total", "offset",
        "limit"}`` (docs/protocols.md §3.8). ValidationError for bad paging or sort."""
        if offset < 0 or not 1 <= limit <= 200:
            raise ValidationError("request", "offset must be >= 0 and limit 1-200")
        order = pins.order_by(sort)
        q = query.strip().casefold()
        if not q:  # the page alone, read in SQL by the name index
            page = self.repo.list_tasks(offset, limit, order)
            total = self.repo.count_live_tasks()[0]
        elif "\n" not in q:  # matched in SQL; only the page's rows are read and viewed
            page, total = self.repo.search_tasks(q, offset, limit, order)
        else:  # a newline may span name, labels and argv: matched on the decoded rows
            found = [t for t in self.repo.list_tasks(order=order)
                     if q in "\n".join([t.name, *t.labels, *t.argv, shlex.join(t.argv)])
                     .casefold()]
            page, total = found[offset:offset + limit], len(found)
        views, pinned = self._task_views(page), pins.pinned_names(self.repo)
        for view in views:
            view["pinned"] = view["name"] in pinned
        return {"tasks": views, "total": total, "offset": offset, "limit": limit}

    def status(self) -> dict[str, Any]:
        """Facts for ``ql3 local status`` (issue 12 item 10): ``profile``, ``tasks``,
        ``enabled_tasks``, ``queued_runs``, ``active_runs`` and ``supervised`` (a live owner
        runs them)."""
        tasks, enabled = self.repo.count_live_tasks()
        queued, active = self.repo.count_unfinished_runs()
        return {"profile": self.repo.get_setting("profile") or "standalone",  # PROFILE_KEY
                "tasks": tasks, "enabled_tasks": enabled, "queued_runs": queued,
                "active_runs": active, "supervised": self.supervised}

    def task_show(self, name: str) -> dict[str, Any]:
        """One task with its five newest runs and ten newest task events, and its stored
        next fire time (issue 10 item 1): ``next_fire`` (ISO UTC, or None: no slot, disabled,
        or not computed yet) and ``next_fire_pending`` (True until a running ``serve``
        computes it after an add, import, enable or backward clock step)."""
        task = self.repo.get_task(name)
        view = self._task_view(task)
        next_fire, pending = self.repo.next_fire_of(task.id)
        view["next_fire"] = iso(next_fire) if task.enabled and not pending else None
        view["next_fire_pending"] = _awaits_next_fire(task, pending)
        recent = self.repo.list_runs(task_id=task.id, limit=5)
        view["recent_runs"] = self._run_views(recent)
        view["last_run"] = last_run_view(recent[0]) if recent else None
        view["events"] = [event_view(e) for e in self.repo.task_events(task.id, limit=10)]
        return view

    def task_enable(self, name: str, enabled: bool) -> dict[str, Any]:
        """Enable or disable a task."""
        task = self.repo.set_task_enabled(name, enabled)
        self._wake()
        return self._task_view(task)

    def task_rm(self, name: str) -> dict[str, Any]:
        """Remove a task; its run history stays."""
        task = self.repo.remove_task(name)
        self._wake()
        return self._task_view(task)

    # -- runs -----------------------------------------------------------------------------

    def _run_view(self, run: Any, events: list[Any] | None = None) -> dict[str, Any]:
        return run_view(run, supervised=self.supervised, leftovers=events)

    def _run_views(self, runs: list[Any]) -> list[dict[str, Any]]:
        """Views of ``runs`` with their leftover facts (one query, issue 10 item 5)."""
        leftovers = self.repo.leftover_events([r.id for r in runs])
        return [self._run_view(r, leftovers.get(r.id)) for r in runs]

    def run_now(self, name: str) -> dict[str, Any]:
        """Queue a manual run (``slot_policy.admit_manual``): ``allow`` always queues one,
        ``replace`` asks the active run to stop first, ``forbid`` answers the task's queued
        run that has not started yet, or a ConflictError while a run is active."""
        task = self.repo.get_task(name)
        run = admit_manual(self.repo, task, self._stop_run or (lambda run_id: False))
        self._wake()
        return self._run_view(run)

    def run_get(self, run_id: str) -> dict[str, Any]:
        """One run with attempts and events. ``run_id``: a run id or any reference
        ``app/run_refs.py`` accepts (``backup#42``, ``backup@last``, an id suffix); an unknown
        or ambiguous one raises NoSuchRunError / AmbiguousRunError (bad input)."""
        run = self.repo.get_run(resolve_run_ref(self.repo, run_id))
        events = self.repo.list_events(run.id)
        view = self._run_view(run, events)
        view["events"] = [event_view(e) for e in events]
        return view

    def runs(
        self, task: str | None = None, limit: int = 20, status: str | None = None
    ) -> list[dict[str, Any]]:
        """Runs newest first, optionally of every task ever called ``task`` (a removed and
        re-added task keeps its history under its name, issue 12 item 1) and/or in one
        ``status`` (a RunStatus value; another raises ValidationError). NotFoundError when no
        task, live or removed, had that name."""
        if task is None:
            return self._run_views(self.repo.list_runs(limit=limit, status=status))
        if not self.repo.task_ids_named(task):
            raise NotFoundError(f"no such task '{task}'")
        return self._run_views(self.repo.list_runs(task_name=task, limit=limit, status=status))

    def runs_page(self, task: str | None = None, status: str | None = None,
                  before: str | None = None, limit: int = 50) -> dict[str, Any]:
        """One page of runs across tasks, newest first, by keyset (docs/protocols.md §3.8):
        ``{"runs": [run view], "next": run id to pass as ``before`` for the older page, or
        None}``. ``task``: every task ever called so (none: an empty page, not an error);
        ``status``: a RunStatus value; ``before``: a run id (UUIDv7) from ``next``; ``limit``
        1-200. ValidationError for bad paging, status or cursor."""
        if not 1 <= limit <= 200:
            raise ValidationError("request", "limit must be 1-200")
        if before is not None:
            validate_uuid7(before, "before")  # InvalidIdentifierError is a ValidationError
        rows = self.repo.list_runs(limit=limit + 1, status=status, task_name=task,
                                   before=before)
        page = rows[:limit]
        return {"runs": self._run_views(page),
                "next": page[-1].id if len(rows) > limit else None}

    def schedule_preview(self, schedule: str, timezone: str, count: int = 5) -> dict[str, Any]:
        """The next ``count`` (1-100) fire times of a schedule not stored anywhere (the
        panel's task form, as you type): ``{"slots": [ISO UTC...]}``, empty for
        ``@boot``/``@once``. ValidationError("schedule" | "timezone" | "count", ...) by the
        rules of ``task add`` (docs/protocols.md §3.7)."""
        from qinglong.shared.cron import parse_schedule

        if not 1 <= count <= 100:
            raise ValidationError("count", "must be between 1 and 100")
        if timezone == "":
            raise ValidationError("timezone", "must not be empty")
        slots = parse_schedule(schedule, timezone).next_slots(self.repo.clock(), count)
        return {"slots": [iso(s) for s in slots]}

    def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a run (any reference ``run_get`` accepts): queued ones at once, active ones
        by TERM, grace, KILL."""
        run = self.repo.request_cancel(resolve_run_ref(self.repo, run_id))
        if self._stop_run is not None:
            self._stop_run(run.id)
        return self._run_view(run)

    def recovery_status(self, verbose: bool = False) -> dict[str, Any]:
        """The startup recovery view: runs in dispatching/running (ADR-0067 §1), and
        ``leftovers_unresolved``: ids of ended runs (newest first, at most 100) whose attempt
        lock is still held by processes that could not be found (issue 10 item 5); with
        ``verbose``, per run its task and the evidence of each active attempt
        (:func:`attempt_evidence`: one attempt's unreadable receipt or lock is reported as
        ``unreadable`` with a reason class and never fails the view; issue 10 item 7)."""
        page = self.repo.inspect_candidates(256)
        view: dict[str, Any] = {
            "supervised": self.supervised,
            "candidates": len(page.candidates),
            "truncated": page.truncated,
            "active_attempts": sum(c.active_attempt_count for c in page.candidates),
            "runs": [c.run_id for c in page.candidates],
            "leftovers_unresolved": self._unresolved_leftovers(),
        }
        if verbose and self.receipts is not None:
            details = []
            for candidate in page.candidates:
                run = self.repo.get_run(candidate.run_id)
                details.append({
                    "run_id": run.id,
                    "task": run.task_name,
                    "status": run.status.value,
                    "attempts": [attempt_evidence(self.receipts, a) for a in run.attempts
                                 if a.status in ATTEMPT_ACTIVE],
                })
            view["details"] = details
        return view

    def _unresolved_leftovers(self) -> list[str]:
        """Runs recorded ``leftovers_unresolved`` whose lock is still held (or cannot be
        probed); once the lock frees, the run drops out of this list."""
        runs: list[str] = []
        for run_id, attempt_id in self.repo.unresolved_leftover_runs():
            try:
                held = self.receipts is None or self.receipts.lock_held(attempt_id)
            except (OSError, QinglongError):
                held = True
            if held and run_id not in runs:
                runs.append(run_id)
        return runs

    def recovery_resolve(self, run_ids: list[str], verdict: str) -> list[dict[str, Any]]:
        """Settle runs a stopped owner left active (receipt first, then the verdict).

        Every id is checked first (a malformed one raises InvalidIdentifierError and
        nothing is done). Then each run is resolved on its own, and a refusal does not stop
        the others: each item is ``{"run_id", "status", "source", "refused"}`` where
        ``refused`` is None or ``{"code", "message"}`` (the typed error's, e.g.
        ``attempt_lock_held``), so the caller can say which runs were settled.
        """
        if self.receipts is None:
            raise ValidationError("request", "recovery needs the receipt store")
        for run_id in run_ids:
            validate_uuid7(run_id, "run_id")
        results: list[dict[str, Any]] = []
        for run_id in run_ids:
            try:
                done = resolve_run(self.repo, self.receipts, run_id, verdict)
            except QinglongError as exc:
                results.append({"run_id": run_id, "status": None, "source": None,
                                "refused": {"code": exc.code, "message": str(exc)}})
                continue
            results.append({"run_id": done.run_id, "status": done.status,
                            "source": done.source, "refused": None})
        self._wake()
        return results

    # -- Qinglong 2.x import and global variables ------------------------------------------

    def legacy_import(self, source: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        """Import a Qinglong 2.x source read by the client (``legacy_import.LegacySource``
        as JSON; ``options``: ``timezone``, ``dry_run``). Returns the import report, which
        names variables but never shows their values. Raises ValidationError."""
        from qinglong.local.app.legacy_import import (
            DEFAULT_TIMEZONE,
            ImportOptions,
            LegacySource,
            import_source,
        )

        opts = ImportOptions(
            timezone=str(_or(options.get("timezone"), DEFAULT_TIMEZONE)),
            dry_run=bool(options.get("dry_run", False)),
        )
        report = import_source(self.repo, LegacySource.from_json(source), opts)
        if not opts.dry_run:
            self._wake()
        return report

    def _vars(self, name: str, edit: Callable[[variables.Values], Any], *,
              source: str | None = None, secret: bool | None = None) -> Any:
        return variables.change(self.repo.db, self.repo.clock(), name, edit, source=source,
                                secret=secret, check=check_variables_size)

    def vars_list(self) -> list[dict[str, Any]]:
        """Global variables by name: ``{"name", "value": "********", "secret", "source",
        "enabled", "updated_at", "values": [{"index", "remark", "enabled",
        "updated_at"}]}``; never a value. ``enabled``: how many values a task receives."""
        views = self.repo.db.read(variables.entries)
        for v in views:
            for x in v["values"]:
                x["updated_at"] = iso(x.pop("updated_at_ms"))
            v.update(value=VALUE_MASK, enabled=sum(x["enabled"] for x in v["values"]),
                     updated_at=max((x["updated_at"] for x in v["values"]), default=None))
        return views

    def vars_set(self, name: str, value: str, *, remark: str | None = None,
                 index: int | None = None, add: bool = False,
                 secret: bool | None = None) -> dict[str, Any]:
        """Store a value of a global variable (source ``manual``): ``{"name", "index",
        "changed"}``. ``add``: a new last value, unless the variable already holds this
        value (then its position, ``changed`` False: docs/panel.md "Variables");
        ``index``: replace value #index (its flag, and remark unless given, kept);
        neither: the variable becomes this one value.
        Limits: ``check_variables_size``; an empty value is refused, as ``vars set``
        refuses empty stdin. Raises ValidationError (never echoing the value),
        NotFoundError for a missing index; ``PATH``, ``LD_*`` and ``QL3_*`` are refused
        (``shared/variable_limits.check_settable_name``)."""
        check_settable_name(variables.check_name(name))
        if not value:  # as `vars set` refuses empty stdin (shared/secret_text.py)
            raise ValidationError("value", "the value is empty")
        if remark is not None and (len(remark) > 200 or not remark.isprintable()):
            raise ValidationError("remark", "a remark is at most 200 characters on one line")

        def edit(values: variables.Values) -> tuple[int, bool]:
            if index is not None:
                _at(values, name, index)
                old = values[index - 1]
                values[index - 1] = [value, old[1] if remark is None else remark, old[2]]
                return index, old[0] != value
            if not add:
                changed = [v[0] for v in values] != [value]
                values[:] = [[value, remark or "", True]]
                return 1, changed
            for position, (have, _, _) in enumerate(values, 1):
                if have == value:  # already there (an import read back): not added again
                    return position, False
            values.append([value, remark or "", True])
            return len(values), True

        position, changed = self._vars(name, edit, source="manual", secret=secret)
        return {"name": name, "index": position, "changed": changed}

    def vars_enable(self, name: str, index: int | None, enabled: bool) -> dict[str, Any]:
        """Enable or disable value #index of a variable (None: all of them); a disabled
        value is kept. ``{"name", "index", "enabled", "changed"}``. Raises NotFoundError."""
        def edit(values: variables.Values) -> int:
            picked = values if index is None else [_at(values, name, index)]
            changed = sum(1 for v in picked if bool(v[2]) != enabled)
            for v in picked:
                v[2] = enabled
            return changed

        return {"name": name, "index": index, "enabled": enabled,
                "changed": self._vars(name, edit)}

    def vars_show(self, name: str, reveal: bool = False) -> dict[str, Any]:
        """One variable as in :meth:`vars_list`; with ``reveal`` each value's ``value`` for a
        non-secret variable. Raises NotFoundError, or ConflictError revealing a secret."""
        view = next((v for v in self.vars_list() if v["name"] == name), None)
        if view is None:
            raise NotFoundError(f"no such variable {name!r}")
        if reveal:
            shown = self.repo.db.read(lambda c: variables.reveal(c, name))
            for item, value in zip(view["values"], shown, strict=True):
                item["value"] = value
        return view

    def vars_rm(self, name: str, index: int | None = None) -> dict[str, Any]:
        """Remove a global variable, or its value #index (later ones move up; the last
        value removes the variable): ``{"name", "index", "removed": True}``. Raises
        NotFoundError naming it, or ConflictError naming the tasks whose secret refers to
        a variable it would remove."""
        def edit(values: variables.Values) -> bool:
            _at(values, name, index or 0)
            if len(values) == 1:
                return True  # the last value: the variable goes, references checked below
            del values[(index or 0) - 1]
            return False

        if index is not None and not self._vars(name, edit):
            return {"name": name, "index": index, "removed": True}
        if not self.secrets.remove_global_variable(name):
            raise NotFoundError(f"no such variable {name!r}")
        return {"name": name, "index": index, "removed": True}

    # -- settings and notifications (issue 12 items 8-9) ----------------------------------

    def settings_show(self) -> list[dict[str, Any]]:
        """Every data-directory setting: ``{"key", "value", "default"}`` (a webhook by host
        only, see :func:`settings.shown`)."""
        return [keys.shown(key, self.repo.get_setting(key)) for key in keys.KEYS]

    def settings_set(self, key: str, value: str | None) -> dict[str, Any]:
        """Set (``value`` text) or unset (None: back to the default) one setting; returns
        its view. Raises ValidationError naming the key."""
        if value is None:
            if key not in keys.KEYS:
                raise ValidationError("setting", f"unknown setting {key!r}")
            self.repo.delete_setting(key)
        else:
            self.repo.set_setting(key, keys.normalise(key, value))
        return keys.shown(key, self.repo.get_setting(key))

    def notify_test(self) -> dict[str, Any]:
        """Send a sample notification now (no run, no event): ``{"configured", "facts",
        "deliveries": [{"channel", "ok", ...}]}``. Bounded by ``notify_timeout_s`` per
        channel."""
        from qinglong.local.app.notifier import Notifier, run_facts, sample_run

        notifier = Notifier(self.repo, lambda: {
            **keys.task_path_env(self.repo.get_setting), **self.repo.global_variables()},
            keys.notify_cwd())
        config = notifier.config()
        facts = run_facts(sample_run(self.repo.clock()), test=True)
        deliveries = notifier.send(config, facts) if config.configured else []
        return {"configured": config.configured, "facts": facts,
                "deliveries": [d.view() for d in deliveries]}

    # -- logs -----------------------------------------------------------------------------

    def _launch_failure_note(self, run_id: str, attempt_id: str, number: int) -> bytes | None:
        """For an attempt that failed at launch (no log file was ever opened): one line
        naming why, from its settle event (issue 12 item 10); None otherwise."""
        for event in self.repo.list_events(run_id):
            if event.attempt_id == attempt_id and event.kind == "attempt_failed":
                return _launch_note(event.detail, number)
        return None

    def logs_read(
        self, run_id: str, attempt: int | None = None, offset: int = 0
    ) -> dict[str, Any]:
        """Read up to 64 KiB of an attempt's log from ``offset`` (bytes).

        ``run_id``: any reference ``run_get`` accepts. ``attempt`` None means the newest
        attempt. Returns ``{"attempt", "attempts",
        "offset", "data", "run_status", "done"}``; ``done`` when the run is terminal and the
        chunk reached the end of the newest attempt's log. A log retired by retention adds
        ``"retired_at"`` (ISO time) and no data; an attempt that failed at launch gives one
        line saying why; a log missing otherwise is LogFileMissingError.
        """
        run = self.repo.get_run(resolve_run_ref(self.repo, run_id))
        terminal = run.status in RUN_TERMINAL
        number = attempt or (run.attempts[-1].number if run.attempts else 1)
        if number > len(run.attempts):  # not started yet
            return {"attempt": number, "attempts": len(run.attempts), "offset": offset,
                    "data": "", "run_status": run.status.value, "done": terminal}
        chosen = next((a for a in run.attempts if a.number == number), None)
        if chosen is None:
            raise NotFoundError("no such attempt")
        retired = self.repo.log_tombstone(chosen.id) if chosen.log_path else None
        if retired is not None:  # docs/protocols.md §3.8: retired by retention, not missing
            return {"attempt": number, "attempts": len(run.attempts), "offset": offset,
                    "data": "", "run_status": run.status.value,
                    "done": terminal and number == run.attempts[-1].number,
                    "retired_at": iso(retired.retired_at_ms)}
        data, next_offset, gap = b"", offset, 0
        if chosen.log_path:
            read = read_raw(_read_log, chosen.log_path, offset, LOG_CHUNK_BYTES)
            if read is not None:
                data, next_offset, gap = read.data, read.next_offset, read.gap
            elif chosen.status not in (AttemptStatus.CLAIMED, AttemptStatus.STARTING):
                note = self._launch_failure_note(run.id, chosen.id, number)
                if note is None:
                    raise LogFileMissingError(f"the log file of attempt {number} is missing")
                data = note[max(0, offset):]
                next_offset = offset + len(data)
        newest = number == run.attempts[-1].number
        done = terminal and newest and not gap and len(data) < LOG_CHUNK_BYTES
        chunk = {
            "attempt": number,
            "attempts": len(run.attempts),
            "offset": next_offset,
            "data": data.decode("utf-8", errors="surrogateescape"),  # byte-exact round trip
            "run_status": run.status.value,
            "done": done,
        }
        if gap:
            chunk["gap"] = gap
        return chunk

    def logs_wait(self, run_id: str, offset: int = 0, timeout_s: float = 20,
                  attempt: int | None = None) -> dict[str, Any]:
        """:meth:`logs_read` of ``attempt`` (None: the newest) once it has data or a gap,
        a newer attempt exists or the run is done, else its empty chunk after ``timeout_s``
        (0-30 s); a long poll on the connection's own thread (docs/protocols.md §3.8)."""
        deadline = time.monotonic() + max(0.0, min(float(timeout_s), 30.0))
        while True:
            chunk = self.logs_read(run_id, attempt, offset)
            if chunk["data"] or chunk.get("gap") or chunk["done"] or (
                    chunk["attempt"] < chunk["attempts"]) or time.monotonic() >= deadline:
                return chunk
            time.sleep(0.1)

    def logs_tail(self, run_id: str, lines: int) -> dict[str, Any]:
        """Where the last ``lines`` lines (1–100000) of the run's newest attempt's log begin:
        ``{"run_id", "attempt", "offset"}`` (raw offset in bytes, for ``logs_read``). Reads the
        log backwards in 64 KiB blocks, at most 64 MiB; a log with fewer lines starts at 0,
        and so does a run with no attempt yet (attempt 1). ``run_id``: any reference."""
        run = self.repo.get_run(resolve_run_ref(self.repo, run_id))
        if not run.attempts:
            return {"run_id": run.id, "attempt": 1, "offset": 0}
        newest = run.attempts[-1]
        offset = 0
        if newest.log_path and self.repo.log_tombstone(newest.id) is None:
            offset = raw_offset(newest.log_path,
                                _tail_offset(newest.log_path, max(1, min(lines, 100_000))))
        return {"run_id": run.id, "attempt": newest.number, "offset": offset}


def _tail_offset(path: str, lines: int) -> int:
    """The byte offset where the last ``lines`` lines of the file at ``path`` begin (a final
    line without a newline counts as a line); 0 if the file is missing or shorter."""
    try:
        size = os.stat(path, follow_symlinks=False).st_size
    except OSError:
        return 0
    position, newlines = size, 0
    floor = max(0, size - TAIL_SCAN_BYTES)
    while position > floor:
        start = max(floor, position - LOG_CHUNK_BYTES)
        data = _read_log(path, start, position - start) or b""
        for index in range(len(data) - 1, -1, -1):
            if data[index] != 0x0A:
                continue
            if start + index == size - 1:  # the final newline ends the last line
                continue
            newlines += 1
            if newlines == lines:
                return start + index + 1
        position = start
    return floor


def secret_entries(obj: object) -> dict[str, SecretEntry]:
    """``{name: {"value": str} | {"variable": str}}`` (None: none) as entries. Raises
    ValidationError("secret_env", ...) without echoing a value."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ValidationError("secret_env", "must be a mapping of names to entries")
    return {str(name): SecretEntry.from_json(entry) for name, entry in obj.items()}


def check_secret_env(argv: tuple[str, ...], env: dict[str, str],
                     secret: dict[str, SecretEntry]) -> None:
    """A secret name must not also be a plain variable, and literal secrets count in the
    launcher's byte budget. Raises ValidationError (names only)."""
    both = sorted(set(env) & set(secret))
    if both:
        raise ValidationError("secret_env", f"{', '.join(both)} is also a plain --env "
                                            "variable; use one or the other")
    literal = {n: e.value for n, e in secret.items() if e.value is not None}
    check_launch_budget(argv, {**env, **literal})


def _launch_note(detail: str | None, number: int) -> bytes | None:
    """The line ``logs`` shows for an attempt whose launch failed before any output."""
    import json

    message = json.loads(detail).get("launch_message") if detail else None
    if not message:
        return None
    return f"[ql3: attempt {number} did not start: {message}]\n".encode()


def last_run_view(run: Any) -> dict[str, Any]:
    """The facts ``task list``/``show`` give about a task's newest run (issue 12 item 2):
    ``{"id", "status", "started_at", "finished_at"`` (ISO UTC or None),
    ``"duration_s"}`` (seconds from its first attempt's start to its end, or to now while
    active; None before it started)."""
    started = next((a.started_at_ms for a in run.attempts if a.started_at_ms is not None), None)
    end = run.finished_at_ms
    if end is None and started is not None and run.status not in RUN_TERMINAL:
        end = int(time.time() * 1000)
    duration = None if started is None or end is None else max(0, end - started) / 1000
    return {"id": run.id, "status": run.status.value, "started_at": iso(started),
            "finished_at": iso(run.finished_at_ms), "duration_s": duration}


def _or(value: Any, default: Any) -> Any:
    """``value`` unless it is None (an empty string or 0 stays, to be validated)."""
    return default if value is None else value


def _read_log(path: str, offset: int, size: int) -> bytes | None:
    """Read a log file without following a symlink anywhere on its path; None if missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValidationError("log", "the log file cannot be opened safely") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValidationError("log", "the log is not a regular file")
        return os.pread(fd, size, max(0, offset))
    finally:
        os.close(fd)


def _awaits_next_fire(task: Task, pending: object) -> bool:
    """True while a running ``serve`` has still to compute the task's next fire time: an
    enabled cron task marked pending. ``@boot`` and ``@once`` tasks never have one, so they
    are never ``pending`` (the mark the store sets on every new task clears at ``serve``)."""
    manual = task.schedule.strip().lower() in ("@boot", "@once")
    return task.enabled and pending is not None and not manual


def check_variables_size(env: dict[str, str]) -> None:
    """Refuse global variables a task could not be started with: one ``NAME=value`` over
    128 KiB (the kernel's MAX_ARG_STRLEN) or all of them over GLOBAL_VARIABLES_MAX_BYTES
    (the launcher's share for them); ``shared/variable_limits.py``. Raises ValidationError
    naming the limit, never a value."""
    from qinglong.local.app.legacy_import import GLOBAL_VARIABLES_MAX_BYTES
    from qinglong.shared.variable_limits import check_variables_size as check

    check(env, field="variable", total_max_bytes=GLOBAL_VARIABLES_MAX_BYTES,
          total_what="global variables")


def _at(values: list[list[Any]], name: str, index: int) -> list[Any]:
    """Value #index (1-based) of ``values``; NotFoundError naming it."""
    if not 1 <= index <= len(values):
        raise NotFoundError(f"variable {name} has no value #{index}")
    return values[index - 1]
