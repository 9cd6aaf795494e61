"""The panel's port: what a page needs from a profile (docs/panel.md "Backends").

Two implementations: the local profile's (:mod:`qinglong.panel.local_backend`, a client of
``ql3 local serve`` over the data directory's socket) and control's
(``qinglong.control.panel_backend``, mounted at ``/ui``, calling the same services as the
HTTP API). A profile names the pages it serves in ``features``; the navigation shows only
those, and a method of a page it does not serve raises :class:`NotInProfileError`. Every
method returns plain JSON-able dicts shaped as the local socket answers (docs/protocols.md
§3.8), so templates render both.
"""

from __future__ import annotations

from typing import Any, Protocol


class BackendUnavailableError(Exception):
    """The profile's owner is not running (local: no ``ql3 local serve`` on the socket)."""


class BackendRefusedError(Exception):
    """The owner refused the request; ``code`` is its stable error code, ``message`` its
    user-data-free message, ``usage`` True for bad input (HTTP 400) and False otherwise.
    ``problems`` (the cluster's task form): ``[{"field": the API's field path such as
    ``schedule`` or ``env.NAME.value``, "code": a reason code, "params": {limit: text}}]``,
    which the panel words in the user's language; never a value."""

    def __init__(self, code: str, message: str, *, usage: bool = False,
                 problems: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.usage = usage
        self.problems = list(problems or [])


#: the optional pages (docs/panel.md "Backends"): ``task_edit`` the task form (new, edit,
#: copy, delete: task_get, task_add, task_edit, task_remove, schedule_preview), ``runs`` the
#: Runs page (runs_page), ``vars`` the Variables page (vars_*), ``dashboard`` the Overview
#: (runs_page and task_page), ``workers`` the Workers page (workers_page; the cluster's),
#: ``scripts`` the local scripts folder (scripts_list, script_read, script_write),
#: ``bundles`` the cluster's script bundles (bundles_list, bundle_show, bundle_push,
#: bundle_remove), ``settings`` the Settings page (settings, notify_test; the cluster's
#: tokens: token_create, token_get, token_revoke). The Tasks page, run now,
#: enable/disable, bulk enable/disable/run, a task's Occurrences, the run page, Stop and
#: the log are in every profile.
FEATURES: frozenset[str] = frozenset({"task_edit", "runs", "vars", "dashboard", "workers",
                                      "scripts", "bundles", "settings"})


#: pinned tasks and saved views (docs/panel.md "Pinned tasks and saved views"): not a page
#: but abilities of the Tasks page, named in ``features`` by a backend that has them:
#: ``task_page(..., sort)``, ``task_pin``, ``views_list``, ``views_save``, ``views_remove``
#: (:class:`ViewsBackend`). Kept out of :data:`FEATURES` so a backend without them (small
#: fakes in tests) still shows the Tasks page as before.
VIEWS = "views"
# -- variable pool scopes (the cluster's Variables page) -----------------------------------
#: a backend naming this in ``features`` takes ``pools`` in ``vars_set``
#: (:class:`VarPoolsBackend`): the Variables page then asks for a pool scope when adding a
#: value (docs/panel.md "Pages", Variables). Kept out of :data:`FEATURES` as :data:`VIEWS` is.
VAR_POOLS = "var_pools"
#: a backend naming this in ``features`` exports values itself (:class:`VarExportBackend`)
#: although ``vars_reveal`` refuses: the cluster, whose page shows every value masked, still
#: exports the plain variables' values, and the secret ones' to an admin who confirms
#: (docs/panel.md "Pages", Variables). Kept out of :data:`FEATURES` as :data:`VIEWS` is.
VAR_EXPORT = "var_export"

#: the sorts of the Tasks page (pinned tasks first in each): by name, by name descending,
#: by next fire time (none last)
SORTS = ("name", "-name", "next_fire")


class NotInProfileError(Exception):
    """This profile does not serve ``feature`` (one of :data:`FEATURES`): the page says so
    (HTTP 501) instead of showing anything made up. Not a BackendRefusedError, so no page
    mistakes it for "not found" or "bad input"."""

    def __init__(self, feature: str) -> None:
        super().__init__(f"{feature} is not available in this profile")
        self.feature = feature


class PanelBackend(Protocol):
    """What the panel asks of a profile. Every method may raise BackendUnavailableError
    (no owner) or BackendRefusedError (the owner said no: unknown task, bad input)."""

    #: shown in the page header: "local" or "cluster"
    profile: str
    #: the optional pages this profile serves (a subset of :data:`FEATURES`)
    features: frozenset[str]

    def available(self) -> bool:
        """True when the owner answers (local: ``ping`` over the socket)."""
        ...

    def task_page(self, offset: int, limit: int, query: str) -> dict[str, Any]:
        """One page of tasks ordered by name: ``{"tasks": [task], "total", "offset",
        "limit"}``; ``query`` filters by a case-insensitive substring of name, label or
        command. A task has ``name, labels, schedule, timezone, next_fire (ISO or None),
        last_run ({"status", "finished_at", ...} or None), enabled``, and in a profile with
        workers ``no_worker`` (True: no live worker's labels hold the task's, so its runs
        wait)."""
        ...

    def run_now(self, task: str) -> dict[str, Any]:
        """Start a run of ``task`` now; the run as JSON (``id``, ``status``, ...)."""
        ...

    def set_enabled(self, task: str, enabled: bool) -> dict[str, Any]:
        """Enable or disable ``task``; the task as JSON."""
        ...

    def cancel_run(self, run: str) -> dict[str, Any]:
        """Stop ``run``: a queued run is cancelled at once, a running one is asked to stop
        (its status moves when it has); the run as JSON. BackendRefusedError ``not_found``
        for an unknown run, another code for a finished one."""
        ...

    def run_get(self, run: str) -> dict[str, Any]:
        """One run with its attempts (``id, task_name, status, attempts, ...``)."""
        ...

    def log_wait(self, run: str, offset: int, timeout_s: float,
                 attempt: int | None = None) -> dict[str, Any]:
        """A long poll on the log of the run's attempt number ``attempt`` (None: the
        newest): bytes after ``offset`` (a byte offset of that log) as soon as there are
        any, or a newer attempt exists, or the run is done, else an empty chunk after
        ``timeout_s`` seconds. ``{"data": str (surrogateescape), "offset": next byte
        offset, "done": bool (the run ended and this, its newest attempt's log, is read to
        its end), "run_status", "attempt": the number read, "attempts": how many the run
        has, "gap": bytes left out}`` (docs/panel.md "Run detail")."""
        ...

    def log_read(self, run: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
        """Up to 64 KiB of the log of the run's attempt ``attempt`` (None: the newest) from
        ``offset`` (bytes), without waiting; same shape as :meth:`log_wait`."""
        ...

    def task_get(self, name: str) -> dict[str, Any]:
        """One task (``task_show``: the task's fields, ``secret_env`` by name with masked
        values, ``recent_runs``)."""
        ...

    def task_add(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Create a task from the ``task_add`` spec (``name, argv, schedule, timezone, env,
        timeout_s, max_attempts, concurrency, labels, secret_env``); the task."""
        ...

    def task_edit(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change a task in place (``task_edit`` changes); the task plus ``changed``."""
        ...

    def task_remove(self, name: str) -> dict[str, Any]:
        """Remove a task (its run history stays); the removed task."""
        ...

    def schedule_preview(self, schedule: str, timezone: str, count: int) -> dict[str, Any]:
        """The next ``count`` fire times of an unsaved schedule: ``{"slots": [ISO UTC]}``;
        a bad schedule or zone is a BackendRefusedError with ``usage`` True whose message
        names the field (``"schedule: ..."``)."""
        ...

    def runs_page(self, task: str | None, status: str | None, before: str | None,
                  limit: int) -> dict[str, Any]:
        """Runs across tasks newest first, by keyset: ``{"runs": [run], "next": cursor or
        None}`` (pass ``next`` as ``before`` for the older page)."""
        ...

    def vars_list(self) -> list[dict[str, Any]]:
        """Global variables by name (``vars_list``): ``{"name", "secret", "source",
        "enabled", "values": [{"index", "remark", "enabled", "updated_at"}]}``, no values."""
        ...

    def vars_reveal(self, name: str) -> dict[str, Any]:
        """One non-secret variable with each value's ``value``; a secret one is a
        BackendRefusedError (its values are write-only)."""
        ...

    def vars_set(self, name: str, value: str, *, remark: str | None, add: bool,
                 secret: bool | None) -> dict[str, Any]:
        """Store a value (``add``: as a new last value; else the variable becomes this one
        value); ``{"name", "index", "changed"}``."""
        ...

    def vars_enable(self, name: str, index: int | None, enabled: bool) -> dict[str, Any]:
        """Enable or disable value #index (None: all)."""
        ...

    def vars_remove(self, name: str, index: int | None) -> dict[str, Any]:
        """Remove value #index, or the whole variable (None)."""
        ...

    # -- Occurrences and Workers (docs/panel.md "Pages") -----------------------------------

    def occurrences_page(self, task: str, before: str | None, limit: int) -> dict[str, Any]:
        """The live task's schedule slots with their outcomes, newest first by keyset
        (the cluster's occurrence ledger, docs/protocols.md §4.2; locally the socket op
        ``task_occurrences``, §3.8): ``{"task": {"name", "schedule", "timezone", "enabled"},
        "items": [{"id", "outcome", "reason", "first_slot", "last_slot" (ISO UTC or None),
        "slot_count", "at_least", "run" ({"id", "number", "status"} or None),
        "recorded_at"}], "next": cursor or None}``. ``outcome``: ``run_created``,
        ``skipped_active``, ``backlog_full``, ``coalesced``, ``skipped_downtime`` or
        ``skipped_disabled``. An unknown task is BackendRefusedError ``not_found``; a bad
        cursor or a ``limit`` outside 1-200 one with ``usage``."""
        ...

    def workers_page(self, before: str | None, limit: int) -> dict[str, Any]:
        """The worker pools and their incarnations not stopped, newest first by keyset
        (``GET /v1/workers``' query), and the live tasks no live worker may run:
        ``{"pools": [{"name", "labels": ["k=v"], "live"}], "workers": [{"id", "name",
        "pool", "labels": ["k=v"], "concurrency", "state" ("live" | "silent"),
        "started_at", "last_seen_at" (ISO UTC), "seen_s" (seconds since, by the database's
        clock), "attempts_held"}], "next": cursor or None, "live": live workers,
        "unmatched": [{"name", "labels"}] (at most 100, by name), "unmatched_total"}``.
        A profile without workers raises NotInProfileError ``workers``."""
    # -- scripts (the local folder) and bundles (the cluster), docs/panel.md "Scripts" ---

    def scripts_list(self) -> dict[str, Any]:
        """The scripts folder: ``{"root", "files": [{"path", "size", "modified_ms"}],
        "truncated"}``."""
        ...

    def script_read(self, path: str) -> dict[str, Any]:
        """One file: ``{"path", "content" (None: not UTF-8), "size", "version"}``."""
        ...

    def script_write(self, path: str, content: str, version: str) -> dict[str, Any]:
        """Save ``content`` if the file is still ``version`` (``""``: new); a stale version
        is a BackendRefusedError with code ``script_changed``, nothing written."""
        ...

    def bundles_list(self, after: str | None = None) -> dict[str, Any]:
        """The cluster's bundles by digest after ``after`` (keyset): ``{"bundles":
        [{"digest", "size_bytes", "member_count", "unpacked_bytes", "created_by",
        "created_at", "used_by"}], "next"}``."""
        ...

    def bundle_show(self, digest: str) -> dict[str, Any]:
        """One bundle with ``members`` and ``used_by_tasks``; ``not_found`` when unknown."""
        ...

    def bundle_file(self, digest: str, path: str) -> dict[str, Any]:
        """One file of a bundle: ``{"digest", "path", "content" (None: not UTF-8 or too
        large to show), "size"}``; ``not_found`` for an unknown bundle or file."""
        ...

    def bundle_push(self, data: bytes) -> dict[str, Any]:
        """Push a gzip tar (the API's checks); ``{"digest", ..., "created"}``; a refused
        archive is a BackendRefusedError with ``usage`` True."""
        ...

    def bundle_remove(self, digest: str) -> dict[str, Any]:
        """Remove an unused bundle (admin); ``bundle_in_use`` while a task names it."""
    def settings(self) -> dict[str, Any]:
        """The Settings page's facts: ``{"profile", ...}``. Local: ``data_dir``, ``owner``
        (``{"pid", "since"}`` or None), ``recovery`` (``recovery_status``), ``channels``
        (``[{"key", "value"}]``, notification settings shown as ``settings_show`` shows
        them). Cluster: ``admin``, ``channels``, ``tokens``, ``signins`` (control's
        ``panel_settings``)."""
        ...

    def notify_test(self) -> dict[str, Any]:
        """Send a sample notification through every channel now, by the profile's real
        notify path: ``{"configured": bool, "deliveries": [{"channel", "ok"}]}``."""
        ...

    def token_create(self, name: str, scope: str) -> dict[str, Any]:
        """A new API token ``{"id", "name", "scope", "token"}`` (cluster, admin; the token
        is in this answer only); NotInProfileError locally."""
        ...

    def token_get(self, token_id: str) -> dict[str, Any]:
        """One token's record (cluster, admin); NotInProfileError locally."""
        ...

    def token_revoke(self, token_id: str) -> dict[str, Any]:
        """Revoke a token now (cluster, admin); NotInProfileError locally."""
        ...


class VarPoolsBackend(PanelBackend, Protocol):
    """A backend with :data:`VAR_POOLS`: variables have a pool scope."""

    def vars_set(self, name: str, value: str, *, remark: str | None, add: bool,
                 secret: bool | None, pools: list[str] | None = None) -> dict[str, Any]:
        """As :meth:`PanelBackend.vars_set`; ``pools`` (names) sets the variable's scope,
        None keeps it (a new variable: every pool). A bad pool name is a BackendRefusedError
        ``invalid_pool`` (usage) whose message says the rule in words, never the input."""
        ...


    def vars_pools(self, name: str, pools: list[str] | None) -> dict[str, Any]:
        """Set the scope of variable ``name`` alone, values untouched (None: every pool
        again); ``{"name", "pools"}``. ``not_found``, ``invalid_pool`` as :meth:`vars_set`."""
        ...


class VarExportBackend(PanelBackend, Protocol):
    """A backend with :data:`VAR_EXPORT`."""

    def vars_export(self, secrets: bool) -> list[dict[str, Any]]:
        """The enabled values to export by name and position: ``[{"name", "value",
        "remark", "secret"}]``, plain variables only unless ``secrets``, which only an
        admin session may ask (BackendRefusedError ``forbidden`` otherwise)."""
        ...


class ViewsBackend(PanelBackend, Protocol):
    """A backend with :data:`VIEWS` (pinned tasks and saved views). Writes need a session
    that may write (``can_write``); the views are the signed-in user's (the cluster: the
    token's name; locally the data directory's one user)."""

    def task_page(self, offset: int, limit: int, query: str,
                  sort: str = "name") -> dict[str, Any]:
        """As :meth:`PanelBackend.task_page`, pinned tasks first, then by ``sort`` (one of
        :data:`SORTS`); each task also says ``pinned``."""
        ...

    def task_pin(self, name: str, pinned: bool) -> dict[str, Any]:
        """Pin or unpin a live task: ``{"name", "pinned"}``; ``not_found`` when unknown."""
        ...

    def views_list(self) -> list[dict[str, Any]]:
        """The user's saved views by name: ``[{"name", "query", "sort"}]``."""
        ...

    def views_save(self, name: str, query: str, sort: str) -> dict[str, Any]:
        """Save a view (1-100 characters of name, a query up to 200, a sort of
        :data:`SORTS`), replacing one of the same name (at most 50 a user); the view."""
        ...

    def views_remove(self, name: str) -> dict[str, Any]:
        """Delete a saved view: ``{"name", "removed": bool}``."""
        ...
