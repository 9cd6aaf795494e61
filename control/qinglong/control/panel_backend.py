"""Control's :class:`~qinglong.panel.backend.PanelBackend` and the panel mounted at ``/ui``
(docs/panel.md "Cluster"; DESIGN §4.6).

The backend calls the same services as the HTTP API over the replica's engine (never HTTP
to itself): the task page is one query over ``tasks`` with each task's newest run
(``api/task_last_run.py``); run now, enable/disable and stop are the API's transactions
(``task_store.set_enabled``, ``scheduling.firing.run_now``, ``api/runs.cancel_in``); the
log is one attempt's (the newest, or one asked for by number), read with
``livelog/read.read_raw`` and woken by the replica's live-log hub. Answers have the shapes
of the local socket (docs/protocols.md §3.8), so the panel's templates render both
profiles.

Who acts comes from the request's session (``qinglong.panel.security.current_session``):
its token's name is recorded as ``by``, and a write without an operator-or-better session
is refused here too (the panel refuses it first, 403).
"""

from __future__ import annotations

import time
import unicodedata
from typing import TYPE_CHECKING, Any, get_args
from uuid import UUID

from sqlalchemy import Text, and_, case, cast, func, or_, select

from qinglong.control.api.errors import ApiError
from qinglong.control.api.tasks import command_shown, like_escape
from qinglong.control.db.tables import attempts, runs, tasks
from qinglong.control.panel_bundles import BundlePanel
from qinglong.control.panel_settings import SettingsMixin
from qinglong.control.panel_views import ViewsMixin
from qinglong.panel.backend import (
    SORTS,
    VAR_EXPORT,
    VAR_POOLS,
    VIEWS,
    BackendRefusedError,
    BackendUnavailableError,
    NotInProfileError,
)
from qinglong.panel.security import current_session

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from qinglong.control.api.context import ApiContext

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out", "lost"})
LOG_EVENT_BYTES = 64 * 1024
IDLE_POLL_S = 1.0  # a run without an attempt yet is re-read this often


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def _refused(exc: ApiError) -> BackendRefusedError:
    """``not_found`` for any 404, else the API's code; the field it names, if any, as
    ``problems`` (``panel_tasks.refused``)."""
    from qinglong.control.panel_tasks import refused

    return refused(exc)


def _answers(chunk: dict[str, Any]) -> bool:
    """A log wait ends on bytes, a gap, the end of the run, or a newer attempt."""
    return bool(chunk["data"] or chunk["gap"] or chunk["done"]
                or chunk["attempt"] < chunk["attempts"])


def _run_id(run: str) -> UUID:
    try:
        return UUID(run)
    except ValueError:
        raise BackendRefusedError("not_found", "no run has this id", usage=True) from None


class ControlPanelBackend(ViewsMixin, BundlePanel, SettingsMixin):
    """Implements PanelBackend over ``ctx`` (the replica's ApiContext: engine, project,
    S3 client and live-log hub). Every method blocks (the panel calls it from a worker
    thread); database errors become BackendUnavailableError (the page says so, 503)."""

    profile = "cluster"
    #: the optional pages it serves (qinglong.panel.backend.FEATURES): the task form (its
    #: spec is the API's JSON: ``panel_tasks.py``), Runs, Overview, Variables, Workers, the
    #: bundles (``panel_bundles.py``) and Settings (``panel_settings.py``); the scripts
    #: folder is the local profile's (docs/panel.md "Cluster"); pinned tasks and saved
    #: views (``panel_views.py``)
    features: frozenset[str] = frozenset({"task_edit", "runs", "dashboard", "vars", "workers",
                                          "bundles", "settings", VIEWS,
                                          VAR_POOLS, VAR_EXPORT})

    def __init__(self, ctx: ApiContext) -> None:
        self.ctx = ctx
        #: a new task's zone in the form: ``serve --default-timezone`` (None: UTC, the API's)
        self.default_timezone = ctx.default_timezone

    # -- helpers ---------------------------------------------------------------------------

    def _actor(self, write: bool, needed: str = "operator") -> str:
        """Who acts (the session's token name); for a ``write``, BackendRefusedError
        ``forbidden`` unless the session's scope includes ``needed`` (the API's scope for
        the same change: ``api/tasks.py``)."""
        session = current_session.get()
        if write and (session is None or not session.can_write
                      or not session.may(needed)):
            raise BackendRefusedError("forbidden", "this sign-in may not change this")
        return session.actor if session is not None and session.actor else "panel"

    def _guard(self, fn: Any) -> Any:
        from sqlalchemy.exc import OperationalError

        try:
            return fn()
        except ApiError as exc:
            raise _refused(exc) from None
        except OperationalError:
            raise BackendUnavailableError("the database cannot be reached") from None

    # -- PanelBackend ----------------------------------------------------------------------

    def available(self) -> bool:
        """True when the database answers ``SELECT 1``."""
        try:
            with self.ctx.engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
        except Exception:  # any failure means "not available"
            return False
        return True

    def task_page(self, offset: int, limit: int, query: str,
                  sort: str = "name") -> dict[str, Any]:
        """One page of live tasks, pinned ones first, then ordered by ``sort`` (``SORTS``:
        name, name descending, next fire with none last; ``PanelBackend.task_page``;
        migration 0017), each saying ``pinned``. ``query``:
        words of the form ``key=value`` filter by label (all must match, JSONB containment
        through migration 0008's index); the other words, together, match a
        case-insensitive substring of the name, command or labels (one scan of the live
        tasks gives both the page and the count; past the last match, a count alone). Each
        task says ``no_worker`` when no live worker may run it (``api/worker_listing.py``)."""
        from qinglong.control.api.task_last_run import PREFIX, with_last_run
        from qinglong.control.api.worker_listing import lease_s_of, no_live_worker

        where = [tasks.c.project_id == self.ctx.project_id, tasks.c.deleted_at.is_(None)]
        wanted: dict[str, str] = {}
        words = []
        for word in unicodedata.normalize("NFC", query.replace("\x00", "")).split():
            key, sep, value = word.partition("=")
            if sep and key:
                wanted[key] = value
            else:
                words.append(word)
        if wanted:
            where.append(tasks.c.labels.contains(wanted))
        if words:
            pattern = "%" + like_escape(" ".join(words)) + "%"
            where.append(or_(tasks.c.name.ilike(pattern, escape="\\"),
                             tasks.c.shell.ilike(pattern, escape="\\"),
                             cast(tasks.c.argv, Text).ilike(pattern, escape="\\"),
                             command_shown().ilike(pattern, escape="\\"),
                             cast(tasks.c.labels, Text).ilike(pattern, escape="\\")))

        if sort not in SORTS:
            raise BackendRefusedError("validation", "sort: unknown", usage=True)
        order: list[Any] = [tasks.c.pinned.desc()]
        if sort == "next_fire":  # a disabled task shows no next fire: last, as none
            order.append(case((tasks.c.enabled, tasks.c.next_fire_at)).asc().nulls_last())
        order += [tasks.c.name.desc() if sort == "-name" else tasks.c.name, tasks.c.id]

        def count(conn: Any) -> int:
            return int(conn.execute(select(func.count()).select_from(tasks)
                                    .where(and_(*where))).scalar_one())

        def read() -> dict[str, Any]:
            unmatched = no_live_worker(lease_s_of(self.ctx)).label("no_worker")
            with self.ctx.engine.connect() as conn:
                if not words:  # indexed: the count and the page's index range are cheap
                    total = count(conn)
                    rows = list(conn.execute(
                        with_last_run(select(tasks, unmatched)).where(*where)
                        .order_by(*order).offset(offset).limit(limit)).mappings())
                else:  # a search reads every live task once: count and page in one scan
                    page = (select(tasks.c.id.label("page_id"),
                                   func.count().over().label("page_total"))
                            .where(*where).order_by(*order).offset(offset).limit(limit)
                            .subquery("page"))
                    rows = list(conn.execute(
                        with_last_run(select(tasks, unmatched, page.c.page_total)
                                      .join(page, page.c.page_id == tasks.c.id))
                        .order_by(*order)).mappings())
                    total = int(rows[0]["page_total"]) if rows else (
                        count(conn) if offset else 0)
            return {"tasks": [self._task(r, PREFIX) for r in rows], "total": int(total),
                    "offset": offset, "limit": limit}

        result: dict[str, Any] = self._guard(read)
        return result

    @staticmethod
    def _task(row: Any, prefix: str) -> dict[str, Any]:
        last = None
        if row[f"{prefix}id"] is not None:
            last = {"id": str(row[f"{prefix}id"]), "number": row[f"{prefix}number"],
                    "status": row[f"{prefix}status"],
                    "finished_at": _iso(row[f"{prefix}finished_at"])}
        return {"name": row["name"],
                "labels": [f"{k}={v}" for k, v in sorted(dict(row["labels"]).items())],
                "schedule": row["schedule"], "timezone": row["timezone"],
                "next_fire": _iso(row["next_fire_at"]) if row["enabled"] else None,
                "last_run": last, "enabled": bool(row["enabled"]),
                "no_worker": bool(row.get("no_worker")), "pinned": bool(row["pinned"])}

    def run_now(self, task: str) -> dict[str, Any]:
        """Run ``task`` now, as ``POST /v1/tasks/{name}/run`` does (its concurrency policy
        applies: a refusal is BackendRefusedError ``run_refused``)."""
        from qinglong.control.api.task_store import live_task, record_event
        from qinglong.control.scheduling.errors import RunRefusedError
        from qinglong.control.scheduling.firing import run_now

        by = self._actor(write=True)

        def write() -> dict[str, Any]:
            with self.ctx.engine.begin() as conn:
                row = live_task(conn, self.ctx.project_id, task, lock=True)
                try:
                    created = run_now(conn, str(row["id"]))
                except RunRefusedError:
                    raise BackendRefusedError("run_refused", "a run of this task is in "
                                              "progress and its policy is forbid") from None
                record_event(conn, str(row["id"]), "run_requested", by=by)
            return {"id": str(created.run_id), "number": created.number, "status": "queued"}

        result: dict[str, Any] = self._guard(write)
        return result

    def set_enabled(self, task: str, enabled: bool) -> dict[str, Any]:
        """Enable or disable ``task`` (``task_store.set_enabled``)."""
        from qinglong.control.api.task_store import set_enabled

        by = self._actor(write=True)

        def write() -> dict[str, Any]:
            with self.ctx.engine.begin() as conn:
                row = set_enabled(conn, self.ctx.project_id, task, enabled, by)
            return {"name": row["name"], "enabled": bool(row["enabled"])}

        result: dict[str, Any] = self._guard(write)
        return result

    def cancel_run(self, run: str) -> dict[str, Any]:
        """Stop ``run`` (``api/runs.cancel_in``): queued → cancelled, else cancel
        requested; BackendRefusedError ``already_finished`` for a finished run."""
        from qinglong.control.api.runs import cancel_in

        by = self._actor(write=True)
        run_id = _run_id(run)

        def write() -> dict[str, Any]:
            with self.ctx.engine.begin() as conn:
                cancel_in(conn, self.ctx.project_id, run_id, by)
            return self.run_get(run)

        result: dict[str, Any] = self._guard(write)
        return result

    def run_get(self, run: str) -> dict[str, Any]:
        """One run of this project with its task's name and its attempts (oldest first, each
        with ``exit_code``, ``signal``, ``reason``, ``started_at``, ``finished_at``: the run
        page's facts, docs/panel.md "Run detail")."""
        run_id = _run_id(run)

        def read() -> dict[str, Any]:
            with self.ctx.engine.connect() as conn:
                row = conn.execute(
                    select(runs, tasks.c.name.label("task_name"))
                    .join(tasks, tasks.c.id == runs.c.task_id)
                    .where(runs.c.project_id == self.ctx.project_id,
                           runs.c.id == str(run_id))).mappings().first()
                if row is None:
                    raise BackendRefusedError("not_found", "no run has this id", usage=True)
                tries = conn.execute(select(attempts.c.id, attempts.c.number,
                                            attempts.c.status, attempts.c.exit_code,
                                            attempts.c.signal, attempts.c.reason,
                                            attempts.c.started_at, attempts.c.finished_at)
                                     .where(attempts.c.run_id == row["id"])
                                     .order_by(attempts.c.number)).mappings().all()
            return {"id": str(row["id"]), "task_name": row["task_name"],
                    "number": row["number"], "status": row["status"],
                    "created_at": _iso(row["created_at"]),
                    "finished_at": _iso(row["finished_at"]),
                    "attempts": [{"id": str(a["id"]), "number": a["number"],
                                  "status": a["status"], "exit_code": a["exit_code"],
                                  "signal": a["signal"], "reason": a["reason"],
                                  "started_at": _iso(a["started_at"]),
                                  "finished_at": _iso(a["finished_at"])} for a in tries]}

        result: dict[str, Any] = self._guard(read)
        return result

    def _chunk(self, run: str, offset: int, number: int | None = None
               ) -> tuple[dict[str, Any], str | None]:
        """The log after ``offset`` of the run's attempt ``number`` (None: the newest), and
        that attempt's id (None before it exists). ``done`` only for the newest attempt's
        log read to its end in an ended run; ``attempt``/``attempts`` as in
        ``PanelBackend.log_wait``."""
        from qinglong.control.api.log_live import _utf8_cut
        from qinglong.control.livelog.read import LogGoneError, read_raw

        info = self.run_get(run)
        status = info["status"]
        tries = info["attempts"]
        number = number or (tries[-1]["number"] if tries else 1)
        chosen = next((a["id"] for a in tries if a["number"] == number), None)
        newest = chosen is not None and number == tries[-1]["number"]
        done = status in TERMINAL and (newest or number > len(tries))
        empty = {"data": "", "offset": offset, "done": done, "run_status": status, "gap": 0,
                 "attempt": number, "attempts": len(tries)}
        if chosen is None:
            return empty, None
        try:
            piece = self._guard(lambda: read_raw(self.ctx.engine, self.ctx.s3, chosen,
                                                 offset=offset, limit=LOG_EVENT_BYTES))
        except LogGoneError:  # retired, tombstoned or never stored: nothing more to show
            return empty, chosen
        if piece.gap:
            return {**empty, "offset": piece.offset, "gap": piece.gap, "done": False}, chosen
        body = piece.body
        keep = len(body) if piece.complete else _utf8_cut(body)
        return {**empty, "data": body[:keep].decode("utf-8", "surrogateescape"),
                "offset": piece.offset + keep,
                "done": done and piece.complete and keep == len(body)}, chosen

    def log_wait(self, run: str, offset: int, timeout_s: float,
                 attempt: int | None = None) -> dict[str, Any]:
        """Bytes after ``offset`` of the run's attempt ``attempt`` (None: the newest) as
        soon as there are any, or a newer attempt exists (the replica's LISTEN fan-out
        wakes the wait), or an empty chunk after ``timeout_s``."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            chunk, attempt_id = self._chunk(run, offset, attempt)
            left = deadline - time.monotonic()
            if _answers(chunk) or left <= 0:
                return chunk
            self._sleep(attempt_id, left)

    async def log_wait_async(self, run: str, offset: int, timeout_s: float,
                             attempt: int | None = None) -> dict[str, Any]:
        """:meth:`log_wait` for the event loop (the panel prefers it): a worker thread only
        for each read, the wait itself on the replica's live-log hub, so open log views
        never tie up the thread pool the API's routes share."""
        import anyio
        from starlette.concurrency import run_in_threadpool

        from qinglong.control.livelog.hub import hub_of

        hub = hub_of(self.ctx.extras)
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            chunk, attempt_id = await run_in_threadpool(self._chunk, run, offset, attempt)
            left = deadline - time.monotonic()
            if _answers(chunk) or left <= 0:
                return chunk
            if attempt_id is None:
                await anyio.sleep(min(IDLE_POLL_S, left))
                continue
            event = hub.wakeups.register(attempt_id)
            try:
                # at most the hub's re-read period: a retry's new attempt wakes no one here
                await hub.wakeups.wait(event, left)
            finally:
                hub.wakeups.unregister(attempt_id, event)

    def _sleep(self, attempt: str | None, left: float) -> None:
        """Wait up to ``left`` seconds for the attempt's next wake-up (at most the hub's
        re-read period), or ``IDLE_POLL_S`` without an attempt or outside the event loop's
        worker threads."""
        if attempt is not None:
            import anyio.from_thread

            from qinglong.control.livelog.hub import hub_of

            hub = hub_of(self.ctx.extras)

            async def wait() -> None:
                event = hub.wakeups.register(attempt)
                try:
                    await hub.wakeups.wait(event, left)
                finally:
                    hub.wakeups.unregister(attempt, event)

            try:
                anyio.from_thread.run(wait)
                return
            except RuntimeError:  # not in a worker thread of the loop
                pass
        time.sleep(min(IDLE_POLL_S, left))

    def log_read(self, run: str, offset: int, attempt: int | None = None) -> dict[str, Any]:
        """Up to 64 KiB of the log of the run's attempt ``attempt`` (None: the newest) from
        ``offset``, without waiting."""
        chunk, _attempt = self._chunk(run, offset, attempt)
        return chunk

    def runs_page(self, task: str | None, status: str | None, before: str | None,
                  limit: int) -> dict[str, Any]:
        """Runs across tasks newest first by keyset (``PanelBackend.runs_page``), the query
        of ``GET /v1/runs`` (``api/runs.runs_with_task``): ``task`` every task, live or
        removed, of that name (or name key); ``status`` a run status; ``before`` a run id
        from ``next``; ``limit`` 1-200. ``{"runs": [{"id", "number", "task", "task_id",
        "status", "trigger", "created_at", "finished_at", "exit_code"}], "next": run id
        or None}``. A bad status, cursor or limit is BackendRefusedError (usage)."""
        from qinglong.control.api.run_models import RunStatus
        from qinglong.control.api.runs import runs_with_task
        from qinglong.shared.names import name_key

        if not 1 <= limit <= 200:
            raise BackendRefusedError("bad_request", "limit must be 1-200", usage=True)
        query = runs_with_task(self.ctx.project_id)
        if task is not None:
            query = query.where(or_(tasks.c.name == task, tasks.c.name_key == name_key(task)))
        if status is not None:
            if status not in get_args(RunStatus):
                raise BackendRefusedError("bad_request", "not a run status", usage=True)
            query = query.where(runs.c.status == status)
        if before is not None:
            try:
                cursor = UUID(before)
            except ValueError:
                raise BackendRefusedError("bad_request", "not a run cursor",
                                          usage=True) from None
            query = query.where(runs.c.id < str(cursor))

        def read() -> dict[str, Any]:
            with self.ctx.engine.connect() as conn:
                rows = list(conn.execute(query.order_by(runs.c.id.desc()).limit(limit + 1))
                            .mappings())
            page = rows[:limit]
            return {"runs": [{"id": str(r["id"]), "number": r["number"],
                              "task": r["task_name"], "task_id": str(r["task_id"]),
                              "status": r["status"], "trigger": r["trigger"],
                              "created_at": _iso(r["created_at"]),
                              "finished_at": _iso(r["finished_at"]),
                              "exit_code": r["exit_code"]} for r in page],
                    "next": str(page[-1]["id"]) if len(rows) > limit else None}

        result: dict[str, Any] = self._guard(read)
        return result

    # -- Occurrences and Workers (``panel_reads.py``: the API's ledger and worker reads) --

    def occurrences_page(self, task: str, before: str | None, limit: int) -> dict[str, Any]:
        """The task's occurrence ledger newest first (``PanelBackend.occurrences_page``),
        as ``GET /v1/tasks/{name}/occurrences`` reads it, with each run's number and
        status. Every scope reads it."""
        from qinglong.control.panel_reads import occurrences_page

        def read() -> dict[str, Any]:
            with self.ctx.engine.connect() as conn:
                return occurrences_page(conn, self.ctx, task, before, limit)

        result: dict[str, Any] = self._guard(read)
        return result

    def workers_page(self, before: str | None, limit: int) -> dict[str, Any]:
        """Pools, incarnations not stopped and the tasks no live worker may run
        (``PanelBackend.workers_page``), by ``GET /v1/workers``' queries. Every scope."""
        from qinglong.control.panel_reads import workers_page

        def read() -> dict[str, Any]:
            with self.ctx.engine.connect() as conn:
                return workers_page(conn, self.ctx, before, limit)

        result: dict[str, Any] = self._guard(read)
        return result

    # -- the task form (``panel_tasks.py``: the API's models and task_store; admin writes)

    def task_get(self, name: str) -> dict[str, Any]:
        """The live task ``name`` as ``GET /v1/tasks/{name}`` shows it (secret values null);
        BackendRefusedError ``not_found``."""
        from qinglong.control import panel_tasks

        result: dict[str, Any] = self._guard(lambda: panel_tasks.get(self.ctx, name))
        return result

    def task_add(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Create a task from ``spec``, ``POST /v1/tasks``'s JSON (admin)."""
        from qinglong.control import panel_tasks

        by = self._actor(write=True, needed="admin")
        result: dict[str, Any] = self._guard(lambda: panel_tasks.create(self.ctx, spec, by))
        return result

    def task_edit(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change ``name`` by ``changes``, ``PATCH /v1/tasks/{name}``'s JSON (admin)."""
        from qinglong.control import panel_tasks

        by = self._actor(write=True, needed="admin")
        result: dict[str, Any] = self._guard(
            lambda: panel_tasks.edit(self.ctx, name, changes, by))
        return result

    def task_remove(self, name: str) -> dict[str, Any]:
        """Remove ``name`` as ``DELETE /v1/tasks/{name}`` does (admin)."""
        from qinglong.control import panel_tasks

        by = self._actor(write=True, needed="admin")
        result: dict[str, Any] = self._guard(lambda: panel_tasks.remove(self.ctx, name, by))
        return result

    def schedule_preview(self, schedule: str, timezone: str, count: int) -> dict[str, Any]:
        """The next ``count`` fire times of an unsaved schedule (``panel_tasks.preview``)."""
        from qinglong.control import panel_tasks

        return panel_tasks.preview(schedule, timezone, count)

    def bundle_picker(self) -> list[dict[str, Any]]:
        """The bundles control knows with their files (``panel_tasks.bundles``): the
        form's entry-point picker. Cluster only (not part of PanelBackend)."""
        from qinglong.control import panel_tasks

        result: list[dict[str, Any]] = self._guard(lambda: panel_tasks.bundles(self.ctx))
        return result

    # -- Variables (``db/variables.py``, the services of ``/v1/vars``) ---------------------

    def _vars_write(self, fn: Any) -> Any:
        """Run ``fn(conn, by)`` in one transaction as an operator-or-better session; the
        store's refusals become BackendRefusedError (their messages never hold a value)."""
        from qinglong.control.secrets.store import SecretsKeyMissingError
        from qinglong.shared.errors import NotFoundError, ValidationError

        by = self._actor(write=True)

        def write() -> Any:
            try:
                with self.ctx.engine.begin() as conn:
                    return fn(conn, by)
            except SecretsKeyMissingError:
                raise BackendRefusedError("secrets_key_missing", "secret values are sealed "
                                          "and this replica has no keyring") from None
            except NotFoundError as exc:
                raise BackendRefusedError("not_found", str(exc), usage=True) from None
            except ValidationError as exc:
                raise BackendRefusedError("invalid_variable", str(exc), usage=True) from None

        return self._guard(write)

    def vars_list(self) -> list[dict[str, Any]]:
        """The cluster's global variables by name, as ``GET /v1/vars`` answers them
        (``db/variables.list_variables``): ``{"name", "secret", "pools" (list, or None for
        every pool), "updated_by", "values": [{"index", "remark", "enabled",
        "updated_at"}]}``; never a value. Every scope reads it."""
        from qinglong.control.db.variables import list_variables

        def read() -> list[dict[str, Any]]:
            with self.ctx.engine.connect() as conn:
                rows = list_variables(conn)
            return [{"name": r["name"], "secret": bool(r["secret"]), "pools": r["pools"],
                     "updated_by": r["updated_by"], "updated_at": _iso(r["updated_at"]),
                     "values": [{"index": v["index"], "remark": v["remark"],
                                 "enabled": bool(v["enabled"]),
                                 "updated_at": _iso(v["updated_at"])}
                                for v in r["values"]]} for r in rows]

        result: list[dict[str, Any]] = self._guard(read)
        return result

    def vars_reveal(self, name: str) -> dict[str, Any]:
        """Always BackendRefusedError ``write_only`` (usage): in the cluster every value is
        write-only, as in ``/v1/vars`` (values leave the store only in a claim answer,
        docs/protocols.md §4.5 "Global variables"); the page shows them masked."""
        raise BackendRefusedError("write_only", "the cluster never shows a variable's "
                                  "values", usage=True)

    def vars_set(self, name: str, value: str, *, remark: str | None, add: bool,
                 secret: bool | None, pools: list[str] | None = None) -> dict[str, Any]:
        """Store a value as ``POST /v1/vars/{name}`` does (``db/variables.put_value``,
        operator): ``add`` a new last value, else the variable becomes this one value;
        ``pools`` (1-64 names of ``POOL_PATTERN``) sets the variable's scope, None keeps it
        (a new variable reaches every pool); sealed with the replica's keyring once sealing
        is on. ``{"name", "index", "changed"}``. A bad pool name: BackendRefusedError
        ``invalid_pool`` (usage) with the API's words for the pattern, never the name."""
        import re

        from qinglong.control.api.errors import PATTERN_WORDS
        from qinglong.control.api.token_routes import POOL_PATTERN
        from qinglong.control.db.variables import put_value

        if pools is not None and (not 1 <= len(pools) <= 64 or not all(
                re.fullmatch(POOL_PATTERN, p) for p in pools)):
            raise BackendRefusedError("invalid_pool", "pools: 1 to 64 names, each: "
                                      + PATTERN_WORDS[POOL_PATTERN], usage=True)
        keyring = self.ctx.extras.get("keyring")
        stored = self._vars_write(lambda conn, by: put_value(
            conn, name, value, who=by, remark=remark, index=None, add=add, secret=secret,
            pools=pools, set_pools=pools is not None, keyring=keyring))
        return {"name": name, "index": stored.index, "changed": stored.changed}

    def vars_pools(self, name: str, pools: list[str] | None) -> dict[str, Any]:
        """Set the variable's pool scope alone as ``POST /v1/vars/{name}/pools`` does
        (``db/variables.change_scope``, operator): None reaches every pool again.
        ``{"name", "pools"}``; BackendRefusedError ``not_found``, ``invalid_pool`` as
        :meth:`vars_set`, ``invalid_variable`` when a pool's variables would pass 1 MiB."""
        import re

        from qinglong.control.api.errors import PATTERN_WORDS
        from qinglong.control.api.token_routes import POOL_PATTERN
        from qinglong.control.db.variables import change_scope

        if pools is not None and (not 1 <= len(pools) <= 64 or not all(
                re.fullmatch(POOL_PATTERN, p) for p in pools)):
            raise BackendRefusedError("invalid_pool", "pools: 1 to 64 names, each: "
                                      + PATTERN_WORDS[POOL_PATTERN], usage=True)
        keyring = self.ctx.extras.get("keyring")
        scope = self._vars_write(lambda conn, by: change_scope(
            conn, name, pools, who=by, keyring=keyring))
        return {"name": name, "pools": scope}

    def vars_export(self, secrets: bool) -> list[dict[str, Any]]:
        """The values ``GET /v1/vars/export`` writes (``db/variables.export_values``):
        ``[{"name", "value", "remark", "secret"}]``, the enabled values of the plain
        variables by name and position; with ``secrets`` the secret ones' too, for an
        admin session only (BackendRefusedError ``forbidden`` otherwise), logged with the
        token's name as the API logs it. ``secrets_key_missing`` when a sealed value
        cannot be opened here."""
        import logging

        from qinglong.control.db.variables import export_values
        from qinglong.control.secrets.store import SecretsKeyMissingError

        by = self._actor(write=secrets, needed="admin")
        keyring = self.ctx.extras.get("keyring")

        def read() -> list[dict[str, Any]]:
            try:
                with self.ctx.engine.connect() as conn:
                    return export_values(conn, secrets=secrets, keyring=keyring)
            except SecretsKeyMissingError:
                raise BackendRefusedError("secrets_key_missing", "secret values are sealed "
                                          "and this replica has no keyring") from None

        rows: list[dict[str, Any]] = self._guard(read)
        if secrets:
            logging.getLogger("qinglong.control.panel").warning(
                "variables exported with secret values by token %r (%d values, panel)",
                by, sum(1 for r in rows if r["secret"]))
        return rows

    def vars_enable(self, name: str, index: int | None, enabled: bool) -> dict[str, Any]:
        """Enable or disable value #index (None: all) as ``POST /v1/vars/{name}/enable``
        and ``/disable`` do (operator); ``{"name", "index", "changed"}``."""
        from qinglong.control.db.variables import set_enabled

        keyring = self.ctx.extras.get("keyring")
        changed = self._vars_write(lambda conn, by: set_enabled(
            conn, name, index, enabled, by, keyring=keyring))
        return {"name": name, "index": index, "changed": int(changed)}

    def vars_remove(self, name: str, index: int | None) -> dict[str, Any]:
        """Remove value #index, or the whole variable (None), as ``DELETE /v1/vars/{name}``
        does (operator); ``{"name", "index"}``."""
        from qinglong.control.db.variables import remove

        self._vars_write(lambda conn, by: remove(conn, name, index))
        return {"name": name, "index": index}

    # -- the local scripts folder: not in the cluster (bundles instead) --------------------

    def scripts_list(self) -> dict[str, Any]:
        """Not in the cluster: raises NotInProfileError ``scripts``."""
        raise NotInProfileError("scripts")

    def script_read(self, path: str) -> dict[str, Any]:
        """Not in the cluster: raises NotInProfileError ``scripts``."""
        raise NotInProfileError("scripts")

    def script_write(self, path: str, content: str, version: str) -> dict[str, Any]:
        """Not in the cluster: raises NotInProfileError ``scripts``."""
        raise NotInProfileError("scripts")


def mount_panel(app: Any, ctx: ApiContext) -> Starlette:
    """Mount the panel at ``/ui`` on control's FastAPI ``app``, over
    :class:`ControlPanelBackend` and :class:`~qinglong.control.panel_sessions.PanelSessionStore`
    (the store is kept at ``ctx.extras["panel_sessions"]`` for the replica's sweep).
    Returns the panel's Starlette application."""
    from qinglong.control.panel_sessions import PanelSessionStore
    from qinglong.panel.app import create_app
    from qinglong.panel.proxies import parse_trusted

    store = ctx.extras.get("panel_sessions")
    if not isinstance(store, PanelSessionStore):
        store = ctx.extras["panel_sessions"] = PanelSessionStore(ctx.engine)
    panel = create_app(ControlPanelBackend(ctx), store,
                       trusted_proxies=parse_trusted(ctx.panel_trusted_proxies))
    app.mount("/ui", panel, name="panel")
    return panel
